package slowpath

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/certs"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/lb"
	"github.com/novaedge/novaedge/slowpath/upstream"
)

// backendState is what outlives configurations for one backend name:
// endpoints (load and health), the health checker, outlier detection and
// the request counters the circuit breaker reads.
type backendState struct {
	name    string
	checker *health.Checker
	outlier *health.Outlier
	// probed are the endpoints the checker watches, and probing whether it
	// runs (guarded by the Proxy's mutex).
	probed  []*endpoint.Endpoint
	probing bool
	active  atomic.Int64 // requests in flight
	retries atomic.Int64 // retries in flight
}

// backend is one backend as a configuration serves it. Immutable.
type backend struct {
	name      string
	protocol  string // upper-case: HTTP, HTTPS, H2C, HTTP2, GRPC
	balancer  lb.Balancer
	hash      *pb.HashPolicy
	endpoints []*endpoint.Endpoint // those in the balancer
	// probed are endpoints the snapshot marks unhealthy: actively checked
	// (their recovery is reported to the controller), never balanced to.
	probed    []*endpoint.Endpoint
	transport upstreamTransport
	state     *backendState
	// connectTimeout bounds L4 dials (HTTP dials use the transport's).
	connectTimeout time.Duration
	limits         limits
	// healthCfg and outlierCfg are applied to state at switch time.
	healthCfg  *health.Config
	outlierCfg health.OutlierConfig
}

// limits are the circuit breaker's thresholds; zero means unlimited.
type limits struct {
	maxRequests int64
	maxPending  int64
	maxConns    int64
}

// upstreamTransport is how a backend reaches its endpoints: an
// *upstream.Transport for plain-text HTTP/1.1, net/http's Transport for
// TLS (h2 or http/1.1 by ALPN), h2c and gRPC.
type upstreamTransport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// transportTLS returns the TLS client configuration of tr, nil for
// plain-text transports.
func transportTLS(tr upstreamTransport) *tls.Config {
	if t, ok := tr.(*http.Transport); ok {
		return t.TLSClientConfig
	}
	return nil
}

// upstreamScheme is the URL scheme of requests sent through tr.
func upstreamScheme(tr upstreamTransport) string {
	if transportTLS(tr) != nil {
		return "https"
	}
	return "http"
}

// transportKey identifies upstream connection settings: a backend whose
// settings did not change keeps its transport, and with it its pool of
// open connections, across reloads.
type transportKey struct {
	protocol        string
	tls             bool
	serverName      string
	insecure        bool
	connectTimeout  time.Duration
	idleTimeout     time.Duration
	maxConnsPerHost int
	ca, clientCert  string // names
	caPEM, certPEM  string // content
}

func endpointAddr(ep *pb.Endpoint) string {
	return net.JoinHostPort(ep.GetAddress(), strconv.FormatUint(uint64(ep.GetPort()), 10))
}

// usesTLS reports whether connections to the backend are TLS.
func usesTLS(protocol string, t *pb.BackendTLS) bool {
	switch protocol {
	case "HTTPS", "HTTP2":
		return true
	}
	return t != nil && (t.GetServerName() != "" || t.GetCa() != "" || t.GetClientCertificate() != "" || t.GetInsecureSkipVerify())
}

// newTransport builds the upstream transport for key. Plain-text HTTP/1.1
// uses the slow path's own client (upstream.Transport: keep-alive pools per
// endpoint, each exchange on the handler's goroutine); H2C and plaintext
// GRPC speak HTTP/2 with prior knowledge and TLS backends negotiate h2 or
// http/1.1 by ALPN, both through net/http.
func newTransport(k transportKey, store *certs.Store) (upstreamTransport, error) {
	if !k.tls && k.protocol != "H2C" && k.protocol != "GRPC" {
		return &upstream.Transport{
			DialTimeout:           k.connectTimeout,
			IdleConnTimeout:       k.idleTimeout,
			MaxIdleConnsPerHost:   256,
			MaxConnsPerHost:       k.maxConnsPerHost,
			ExpectContinueTimeout: time.Second,
		}, nil
	}
	dialer := &net.Dialer{Timeout: k.connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          0, // no global cap; per host below
		MaxIdleConnsPerHost:   256,
		MaxConnsPerHost:       k.maxConnsPerHost,
		IdleConnTimeout:       k.idleTimeout,
		ExpectContinueTimeout: time.Second,
		// The proxy passes the client's Accept-Encoding through and the
		// response as is; it must not add gzip and decompress.
		DisableCompression: true,
		// Proxies must not follow the environment's HTTP_PROXY.
		Proxy: nil,
	}
	protos := new(http.Protocols)
	tlsOn := k.tls
	if tlsOn {
		protos.SetHTTP1(k.protocol != "GRPC")
		protos.SetHTTP2(true)
		tr.ForceAttemptHTTP2 = true
	} else { // H2C and plaintext GRPC
		protos.SetUnencryptedHTTP2(true)
	}
	tr.Protocols = protos
	if tlsOn {
		cfg := &tls.Config{ServerName: k.serverName, InsecureSkipVerify: k.insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // insecureSkipVerify is the user's explicit choice
		if k.ca != "" {
			pool, ok := store.Pool(k.ca)
			if !ok {
				return nil, fmt.Errorf("tls.ca: CA bundle %q not in the snapshot", k.ca)
			}
			cfg.RootCAs = pool
		}
		if k.clientCert != "" {
			pair, ok := store.Pair(k.clientCert)
			if !ok {
				return nil, fmt.Errorf("tls.clientCertificate: %q not in the snapshot or has no key", k.clientCert)
			}
			cfg.Certificates = []tls.Certificate{*pair}
		}
		tr.TLSClientConfig = cfg
	}
	return tr, nil
}

func msOr(ms uint32, def time.Duration) time.Duration {
	if ms == 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

func normProtocol(p string) string { return strings.ToUpper(p) }

// checked are the endpoints active health checks watch: those balanced to
// and those the snapshot marks unhealthy.
func (be *backend) checked() []*endpoint.Endpoint {
	return append(slices.Clone(be.endpoints), be.probed...)
}
