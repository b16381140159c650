package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// maxDrain bounds how much of an HTTP probe's response body is read: enough
// for a short status page, not a download.
const maxDrain = 4 << 10

// probeFunc runs one probe of addr ("host:port") and returns nil when it
// passes. ctx carries the probe's timeout and is cancelled when the endpoint
// stops being checked.
type probeFunc func(ctx context.Context, addr string) error

// newProbe returns the probe for cfg. Every probe opens its own connection
// and closes it afterwards: a probe then proves that the backend still
// accepts connections (not merely that an old one lives), and thousands of
// checked endpoints hold no idle sockets between probes. The cost, one
// handshake per interval, is small at health-check rates.
func newProbe(cfg Config) probeFunc {
	switch cfg.Type {
	case TypeHTTP:
		return newHTTPProbe(cfg)
	case TypeTCP:
		return tcpProbe
	case TypeGRPC:
		return grpcProbe(cfg)
	default:
		err := fmt.Errorf("unknown health check type %q", cfg.Type)
		return func(context.Context, string) error { return err }
	}
}

// probeAddr returns the address to probe for an endpoint: its own, or the
// same host on the override port.
func probeAddr(epAddr string, port uint32) (string, error) {
	if port == 0 {
		return epAddr, nil
	}
	host, _, err := net.SplitHostPort(epAddr)
	if err != nil {
		return "", fmt.Errorf("endpoint address %q: %w", epAddr, err)
	}
	return net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10)), nil
}

func tcpProbe(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("tcp connect: %w", err)
	}
	return c.Close()
}

// tlsConfig clones cfg.TLS and, when it names no server, uses the Host
// setting for SNI and verification, since the URL only holds an IP.
func tlsConfig(cfg Config) *tls.Config {
	t := cfg.TLS.Clone()
	if t.ServerName == "" && cfg.Host != "" {
		t.ServerName = cfg.Host
		if h, _, err := net.SplitHostPort(cfg.Host); err == nil {
			t.ServerName = h
		}
	}
	return t
}

func newHTTPProbe(cfg Config) probeFunc {
	var protos http.Protocols
	scheme := "http"
	tr := &http.Transport{
		// No Proxy: probes go straight to the endpoint, whatever the
		// environment says.
		DialContext:            (&net.Dialer{}).DialContext,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		Protocols:              &protos,
	}
	switch {
	case cfg.TLS != nil:
		scheme = "https"
		tr.TLSClientConfig = tlsConfig(cfg)
		protos.SetHTTP1(true)
		protos.SetHTTP2(true)
	case cfg.H2C:
		protos.SetUnencryptedHTTP2(true)
	default:
		protos.SetHTTP1(true)
	}
	client := &http.Client{
		Transport: tr,
		// A redirect is an answer: whether it counts is up to
		// ExpectedStatuses (3xx are healthy by default).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	path, host, expected := cfg.HTTPPath, cfg.Host, cfg.ExpectedStatuses
	return func(ctx context.Context, addr string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+path, nil)
		if err != nil {
			return fmt.Errorf("http request: %w", err)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("User-Agent", UserAgent)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("http get: %w", err)
		}
		// Drain a little so a short body is read in full; the
		// connection is closed either way.
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
		_ = resp.Body.Close()
		if !statusOK(resp.StatusCode, expected) {
			return fmt.Errorf("http status %d", resp.StatusCode)
		}
		return nil
	}
}

func statusOK(code int, expected []int) bool {
	if len(expected) == 0 {
		return code >= 200 && code <= 399
	}
	return slices.Contains(expected, code)
}

func grpcProbe(cfg Config) probeFunc {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(tlsConfig(cfg))
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithUserAgent(UserAgent)}
	if cfg.Host != "" {
		opts = append(opts, grpc.WithAuthority(cfg.Host))
	}
	service := cfg.GRPCService
	return func(ctx context.Context, addr string) error {
		// passthrough: the address is already resolved; no DNS.
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			return fmt.Errorf("grpc client: %w", err)
		}
		defer func() { _ = conn.Close() }()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return fmt.Errorf("grpc health check: %w", err)
		}
		if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("grpc health status %s", s)
		}
		return nil
	}
}
