package slowpath

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/certs"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/lb"
)

// backendState is what outlives configurations for one backend name:
// endpoints (load and health), the health checker, outlier detection and
// the request counters the circuit breaker reads.
type backendState struct {
	name    string
	checker *health.Checker
	outlier *health.Outlier
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
	transport *http.Transport
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

// transportKey identifies upstream connection settings: a backend whose
// settings did not change keeps its *http.Transport, and with it its pool
// of open connections, across reloads.
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

// newTransport builds the upstream transport for key. HTTP/1.1 keeps idle
// connections per endpoint; H2C and plaintext GRPC speak HTTP/2 with prior
// knowledge; TLS backends negotiate h2 or http/1.1 by ALPN.
func newTransport(k transportKey, store *certs.Store) (*http.Transport, error) {
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
	switch {
	case !tlsOn && (k.protocol == "H2C" || k.protocol == "GRPC"):
		protos.SetUnencryptedHTTP2(true)
	case tlsOn:
		protos.SetHTTP1(k.protocol != "GRPC")
		protos.SetHTTP2(true)
		tr.ForceAttemptHTTP2 = true
	default:
		protos.SetHTTP1(true)
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
