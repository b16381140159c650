package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/endpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// statusServer answers every request with a status the test sets, and
// records what it saw.
type statusServer struct {
	status atomic.Int32
	conns  atomic.Int32

	mu   sync.Mutex
	last *http.Request
}

func (s *statusServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.last = r
	s.mu.Unlock()
	if s.status.Load() == http.StatusFound {
		w.Header().Set("Location", "/elsewhere")
	}
	w.WriteHeader(int(s.status.Load()))
	_, _ = w.Write([]byte(strings.Repeat("x", 10_000)))
}

func (s *statusServer) lastRequest() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func newStatusServer(t *testing.T, start func(*httptest.Server)) (*statusServer, *httptest.Server) {
	t.Helper()
	s := &statusServer{}
	s.status.Store(http.StatusOK)
	srv := httptest.NewUnstartedServer(s)
	// The failed-verification case makes the server log; keep it quiet.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	start(srv)
	t.Cleanup(srv.Close)
	return s, srv
}

func runProbe(cfg Config, addr string) error {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	return newProbe(cfg)(ctx, addr)
}

func TestHTTPProbe(t *testing.T) {
	s, srv := newStatusServer(t, (*httptest.Server).Start)
	addr := srv.Listener.Addr().String()
	tests := []struct {
		name     string
		status   int
		expected []int
		ok       bool
	}{
		{"200 passes by default", 200, nil, true},
		{"302 passes by default, not followed", 302, nil, true},
		{"404 fails by default", 404, nil, false},
		{"503 fails by default", 503, nil, false},
		{"503 passes when expected", 503, []int{200, 503}, true},
		{"200 fails when only 204 expected", 200, []int{204}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.status.Store(int32(tc.status))
			cfg := Config{Type: TypeHTTP, Timeout: 10 * time.Second, HTTPPath: "/healthz?full=1", Host: "app.example", ExpectedStatuses: tc.expected}
			err := runProbe(cfg, addr)
			if (err == nil) != tc.ok {
				t.Fatalf("probe error %v, want ok=%v", err, tc.ok)
			}
			r := s.lastRequest()
			if r.Method != http.MethodGet || r.URL.Path != "/healthz" || r.URL.RawQuery != "full=1" ||
				r.Host != "app.example" || r.UserAgent() != UserAgent {
				t.Fatalf("request %s %s host %q agent %q", r.Method, r.URL, r.Host, r.UserAgent())
			}
		})
	}
	// Each probe opened a connection of its own.
	if n := s.conns.Load(); n != int32(len(tests)) {
		t.Fatalf("%d connections for %d probes", n, len(tests))
	}
}

func TestHTTPProbeH2C(t *testing.T) {
	s, srv := newStatusServer(t, func(srv *httptest.Server) {
		srv.Config.Protocols = &http.Protocols{}
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	})
	addr := srv.Listener.Addr().String()
	for range 2 {
		if err := runProbe(Config{Type: TypeHTTP, Timeout: 10 * time.Second, H2C: true}, addr); err != nil {
			t.Fatal(err)
		}
	}
	if p := s.lastRequest().ProtoMajor; p != 2 {
		t.Fatalf("h2c probe came as HTTP/%d", p)
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections for 2 h2c probes", n)
	}
}

func TestHTTPProbeTLS(t *testing.T) {
	s, srv := newStatusServer(t, (*httptest.Server).StartTLS)
	addr := srv.Listener.Addr().String()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tests := []struct {
		name string
		host string
		ok   bool
	}{
		// httptest's certificate names example.com and 127.0.0.1.
		{"verified against the IP", "", true},
		{"verified against Host", "example.com:443", true},
		{"Host not in the certificate", "other.test", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Type: TypeHTTP, Timeout: 10 * time.Second, Host: tc.host, TLS: &tls.Config{RootCAs: roots}}
			if err := runProbe(cfg, addr); (err == nil) != tc.ok {
				t.Fatalf("probe error %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if r := s.lastRequest(); r.TLS == nil || r.TLS.ServerName != "example.com" {
		t.Fatalf("last passing probe: TLS %+v, want SNI example.com", r.TLS)
	}
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	cfg := Config{Type: TypeTCP, Timeout: 10 * time.Second}
	// The kernel completes the handshake from the backlog.
	if err := runProbe(cfg, addr); err != nil {
		t.Fatalf("open listener: %v", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := runProbe(cfg, addr); err == nil {
		t.Fatal("closed listener passed")
	}
}

func TestGRPCProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	addr := ln.Addr().String()

	tests := []struct {
		name    string
		service string
		status  healthpb.HealthCheckResponse_ServingStatus
		ok      bool
	}{
		{"whole server serving", "", healthpb.HealthCheckResponse_SERVING, true},
		{"service serving", "shop.Cart", healthpb.HealthCheckResponse_SERVING, true},
		{"service not serving", "shop.Cart", healthpb.HealthCheckResponse_NOT_SERVING, false},
		{"service back", "shop.Cart", healthpb.HealthCheckResponse_SERVING, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs.SetServingStatus(tc.service, tc.status)
			cfg := Config{Type: TypeGRPC, Timeout: 10 * time.Second, GRPCService: tc.service}
			if err := runProbe(cfg, addr); (err == nil) != tc.ok {
				t.Fatalf("probe error %v, want ok=%v", err, tc.ok)
			}
		})
	}
	t.Run("unknown service", func(t *testing.T) {
		if err := runProbe(Config{Type: TypeGRPC, Timeout: 10 * time.Second, GRPCService: "nope"}, addr); err == nil {
			t.Fatal("unknown service passed")
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		gs.Stop()
		if err := runProbe(Config{Type: TypeGRPC, Timeout: 10 * time.Second}, addr); err == nil {
			t.Fatal("stopped server passed")
		}
	})
}

// hangListener accepts connections and never answers on them.
func hangListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestCheckerRealProbes drives a Checker on the fake clock against real
// servers: the interval is fake, the probes are real.
func TestCheckerRealProbes(t *testing.T) {
	t.Run("HTTP 200 then 503 then 200", func(t *testing.T) {
		s, srv := newStatusServer(t, (*httptest.Server).Start)
		clk := newFakeClock()
		c := NewChecker(Config{Type: TypeHTTP, Interval: time.Minute, Timeout: 10 * time.Second},
			Options{Clock: clk, Rand: func() float64 { return 0 }})
		defer c.Stop()
		ep := endpoint.New(srv.Listener.Addr().String())
		c.Update([]*endpoint.Endpoint{ep})
		var got []bool
		for _, status := range []int32{200, 503, 503, 503, 200, 200} {
			s.status.Store(status)
			if len(got) > 0 {
				clk.Advance(time.Minute)
			}
			clk.WaitTimers(t, 1)
			got = append(got, ep.ActiveHealthy())
		}
		want := []bool{true, true, true, false, false, true}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("verdicts %v, want %v", got, want)
			}
		}
	})
	t.Run("TCP closed port, port override", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := uint32(ln.Addr().(*net.TCPAddr).Port)
		clk := newFakeClock()
		c := NewChecker(Config{Type: TypeTCP, Interval: time.Minute, Timeout: 10 * time.Second, Port: port},
			Options{Clock: clk, Rand: func() float64 { return 0 }})
		defer c.Stop()
		// The endpoint's own port has nothing; the override does.
		ep := endpoint.New("127.0.0.1:1")
		c.Update([]*endpoint.Endpoint{ep})
		clk.WaitTimers(t, 1)
		if !ep.ActiveHealthy() {
			t.Fatal("unhealthy while the override port listens")
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			clk.Advance(time.Minute)
			clk.WaitTimers(t, 1)
		}
		if ep.ActiveHealthy() {
			t.Fatal("healthy after 3 probes of a closed port")
		}
	})
	t.Run("gRPC status flips", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := health.NewServer()
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		go func() { _ = gs.Serve(ln) }()
		defer gs.Stop()
		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
		clk := newFakeClock()
		c := NewChecker(Config{Type: TypeGRPC, Interval: time.Minute, Timeout: 10 * time.Second, GRPCService: "svc",
			HealthyThreshold: 1, UnhealthyThreshold: 1}, Options{Clock: clk, Rand: func() float64 { return 0 }})
		defer c.Stop()
		ep := endpoint.New(ln.Addr().String())
		c.Update([]*endpoint.Endpoint{ep})
		clk.WaitTimers(t, 1)
		if ep.ActiveHealthy() {
			t.Fatal("healthy while NOT_SERVING")
		}
		hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
		clk.Advance(time.Minute)
		clk.WaitTimers(t, 1)
		if !ep.ActiveHealthy() {
			t.Fatal("unhealthy while SERVING")
		}
	})
	// A backend that accepts and never answers fails the probe once the
	// (short, real) timeout passes; only the verdict is asserted.
	for _, typ := range []string{TypeHTTP, TypeGRPC} {
		t.Run(typ+" timeout", func(t *testing.T) {
			clk := newFakeClock()
			var reason atomic.Value
			c := NewChecker(Config{Type: typ, Interval: time.Minute, Timeout: 200 * time.Millisecond},
				Options{Clock: clk, OnChange: func(_ *endpoint.Endpoint, _ bool, r string) { reason.Store(r) }})
			defer c.Stop()
			ep := endpoint.New(hangListener(t))
			c.Update([]*endpoint.Endpoint{ep})
			clk.WaitTimers(t, 1)
			if ep.ActiveHealthy() {
				t.Fatal("healthy though the backend never answered")
			}
			if r, _ := reason.Load().(string); !strings.Contains(r, "timed out after 200ms") {
				t.Fatalf("reason %q does not say it timed out", r)
			}
		})
	}
}
