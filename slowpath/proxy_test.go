package slowpath

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// env is a slow path serving on a loopback socket the test opened.
type env struct {
	t    testing.TB
	p    *Proxy
	addr string // 127.0.0.1:port
	port uint32
	logs *lockedBuf
	reg  *prometheus.Registry
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newEnv(t *testing.T) *env { return newEnvB(t) }

func newEnvB(t testing.TB) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with options changed by set (nil: none).
func newEnvWith(t testing.TB, set func(*Options)) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sset := sockets.NewSet()
	key := sockets.Key{Network: "tcp", Addr: netip.MustParseAddrPort(ln.Addr().String())}
	if err := sset.Adopt(&sockets.Socket{Key: key, Listener: ln}); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	reg := prometheus.NewRegistry()
	opts := Options{Sockets: sset, Registry: reg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), DrainTimeout: 2 * time.Second}
	if set != nil {
		set(&opts)
	}
	p := New(opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("slow path log:\n%s", logs.String())
		}
	})
	t.Cleanup(p.Close)
	return &env{t: t, p: p, addr: ln.Addr().String(), port: uint32(key.Addr.Port()), logs: logs, reg: reg}
}

func (e *env) apply(snap *pb.ConfigSnapshot) error {
	e.t.Helper()
	ch, err := e.p.Compile(snap)
	if err != nil {
		return err
	}
	return ch.Apply(context.Background())
}

func (e *env) mustApply(snap *pb.ConfigSnapshot) {
	e.t.Helper()
	if err := e.apply(snap); err != nil {
		e.t.Fatal(err)
	}
}

// snap assembles a snapshot with one listener on the env's socket.
func (e *env) snap(proto pb.Protocol, tlsCfg *pb.ListenerTLS, routes []*pb.Route, backends []*pb.Backend, certs ...*pb.Certificate) *pb.ConfigSnapshot {
	l := &pb.Listener{Name: "ns/gw/l", Gateway: "ns/gw", Addresses: []string{"127.0.0.1"}, Port: e.port, Protocol: proto, Tls: tlsCfg}
	for _, r := range routes {
		l.Routes = append(l.Routes, r.GetName())
		if len(r.Listeners) == 0 {
			r.Listeners = []string{l.Name}
		}
		if r.Kind == pb.RouteKind_ROUTE_KIND_UNSPECIFIED {
			r.Kind = pb.RouteKind_ROUTE_KIND_HTTP
		}
	}
	return &pb.ConfigSnapshot{Version: 1, Cluster: &pb.ClusterConfig{Listeners: []*pb.Listener{l}, Routes: routes, Backends: backends, Certificates: certs}}
}

func prefix(p string) *pb.RouteMatch {
	return &pb.RouteMatch{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: p}}
}

func route(name string, rules ...*pb.RouteRule) *pb.Route {
	return &pb.Route{Name: name, Rules: rules}
}

func rule(match *pb.RouteMatch, backends ...string) *pb.RouteRule {
	r := &pb.RouteRule{Matches: []*pb.RouteMatch{match}}
	for _, b := range backends {
		r.Backends = append(r.Backends, &pb.WeightedBackend{Backend: b, Weight: 1})
	}
	return r
}

func backendOf(name string, addrs ...string) *pb.Backend {
	b := &pb.Backend{Name: name}
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		b.Endpoints = append(b.Endpoints, &pb.Endpoint{Address: ap.Addr().String(), Port: uint32(ap.Port()), Weight: 1, State: pb.EndpointState_ENDPOINT_STATE_HEALTHY})
	}
	return b
}

// echo is what the test backends answer: who they are and what arrived.
type echo struct {
	Backend string              `json:"backend"`
	Method  string              `json:"method"`
	Host    string              `json:"host"`
	Path    string              `json:"path"`
	Proto   string              `json:"proto"`
	Header  map[string][]string `json:"header"`
	Body    string              `json:"body"`
}

func echoServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(echoHandler(name))
	t.Cleanup(s.Close)
	return s
}

func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", name)
		_ = json.NewEncoder(w).Encode(echo{Backend: name, Method: r.Method, Host: r.Host, Path: r.URL.RequestURI(), Proto: r.Proto, Header: r.Header, Body: string(body)})
	})
}

func hostport(s *httptest.Server) string { return s.Listener.Addr().String() }

func get(t *testing.T, c *http.Client, url string, hdr ...string) (*http.Response, echo, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var e echo
	_ = json.Unmarshal(raw, &e)
	return resp, e, string(raw)
}

func TestHTTPRoutingAndHeaders(t *testing.T) {
	e := newEnv(t)
	a, b := echoServer(t, "a"), echoServer(t, "b")
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil,
		[]*pb.Route{route("ns/r",
			rule(prefix("/a"), "ns/a"),
			rule(prefix("/b"), "ns/b"),
			rule(prefix("/missing"), "ns/none"),
		)},
		[]*pb.Backend{backendOf("ns/a", hostport(a)), backendOf("ns/b", hostport(b))}))
	c := &http.Client{}
	base := "http://" + e.addr

	resp, got, _ := get(t, c, base+"/a/x?q=1", "Host", "shop.test", "X-Forwarded-For", "10.9.9.9", "Connection", "X-Hop", "X-Hop", "secret")
	if resp.StatusCode != 200 || got.Backend != "a" || got.Path != "/a/x?q=1" || got.Host != "shop.test" {
		t.Fatalf("GET /a: %d %+v", resp.StatusCode, got)
	}
	h := http.Header(got.Header)
	if xff := h.Get("X-Forwarded-For"); xff != "10.9.9.9, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's appended", xff)
	}
	if h.Get("X-Forwarded-Proto") != "http" || h.Get("X-Forwarded-Host") != "shop.test" {
		t.Errorf("X-Forwarded-Proto/Host = %q/%q", h.Get("X-Forwarded-Proto"), h.Get("X-Forwarded-Host"))
	}
	if fwd := h.Get("Forwarded"); fwd != `for=127.0.0.1;host="shop.test";proto=http` {
		t.Errorf("Forwarded = %q", fwd)
	}
	if len(h.Get("X-Request-Id")) != 32 {
		t.Errorf("X-Request-Id = %q, want 32 hex digits", h.Get("X-Request-Id"))
	}
	if h.Get("X-Hop") != "" {
		t.Error("a header named in Connection (hop-by-hop) reached the backend")
	}

	_, got, _ = get(t, c, base+"/b", "X-Request-Id", "client-id-1")
	if got.Backend != "b" || http.Header(got.Header).Get("X-Request-Id") != "client-id-1" {
		t.Fatalf("GET /b: %+v", got)
	}
	resp, _, body := get(t, c, base+"/nothing")
	if resp.StatusCode != 404 || !strings.Contains(body, "no route") {
		t.Fatalf("unrouted: %d %q", resp.StatusCode, body)
	}
	resp, _, body = get(t, c, base+"/missing")
	if resp.StatusCode != 500 || !strings.Contains(body, "ns/none") {
		t.Fatalf("missing backend: %d %q", resp.StatusCode, body)
	}
}

func TestHTTPSBySNIAndHTTP2(t *testing.T) {
	e := newEnv(t)
	ca, err := testcert.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	c1, k1, _ := ca.Leaf("a.example.com")
	c2, k2, _ := ca.Leaf("*.shop.test")
	be := echoServer(t, "a")
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTPS,
		&pb.ListenerTLS{Certificates: []string{"ns/a", "ns/shop"}, MinVersion: "TLS1.2"},
		[]*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))},
		[]*pb.Backend{backendOf("ns/a", hostport(be))},
		&pb.Certificate{Name: "ns/a", CertPem: c1, KeyPem: k1}, &pb.Certificate{Name: "ns/shop", CertPem: c2, KeyPem: k2}))

	for _, tc := range []struct {
		sni    string
		h2     bool
		proto  string
		leafCN string
	}{
		{"a.example.com", true, "HTTP/2.0", "a.example.com"},
		{"www.shop.test", true, "HTTP/2.0", "*.shop.test"},
		{"www.shop.test", false, "HTTP/1.1", "*.shop.test"},
	} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: tc.sni, RootCAs: ca.Pool()}, ForceAttemptHTTP2: tc.h2}
		if !tc.h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		c := &http.Client{Transport: tr}
		resp, got, _ := get(t, c, "https://"+e.addr+"/x", "Host", tc.sni)
		if resp.StatusCode != 200 || resp.Proto != tc.proto || got.Backend != "a" {
			t.Fatalf("SNI %s: %d %s %+v", tc.sni, resp.StatusCode, resp.Proto, got)
		}
		if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != tc.leafCN {
			t.Errorf("SNI %s: certificate %s, want %s", tc.sni, cn, tc.leafCN)
		}
		if http.Header(got.Header).Get("X-Forwarded-Proto") != "https" {
			t.Errorf("X-Forwarded-Proto = %q", http.Header(got.Header).Get("X-Forwarded-Proto"))
		}
		tr.CloseIdleConnections()
	}
}

func TestH2CPriorKnowledgeBothSides(t *testing.T) {
	e := newEnv(t)
	// An h2c backend: HTTP/2 without TLS.
	bs := httptest.NewUnstartedServer(echoHandler("h2c"))
	bs.Config.Protocols = new(http.Protocols)
	bs.Config.Protocols.SetUnencryptedHTTP2(true)
	bs.Start()
	defer bs.Close()
	b := backendOf("ns/h2c", hostport(bs))
	b.Protocol = "H2C"
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/h2c"))}, []*pb.Backend{b}))

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	resp, got, _ := get(t, &http.Client{Transport: tr}, "http://"+e.addr+"/")
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || got.Proto != "HTTP/2.0" {
		t.Fatalf("h2c: %d client %s backend %s", resp.StatusCode, resp.Proto, got.Proto)
	}
}

func TestSchemeRedirect(t *testing.T) {
	e := newEnv(t)
	s := e.snap(pb.Protocol_PROTOCOL_HTTP, nil, nil, nil)
	s.Cluster.Listeners[0].RedirectScheme = &pb.RedirectScheme{Scheme: "https", StatusCode: 308, Port: 8443}
	e.mustApply(s)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _, _ := get(t, c, "http://"+e.addr+"/p?q=1", "Host", "shop.test:80")
	if resp.StatusCode != 308 || resp.Header.Get("Location") != "https://shop.test:8443/p?q=1" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestRetryOnConnectionFailure: one endpoint refuses connections; with a
// retry policy every request still succeeds, on the other endpoint, and
// outlier detection ejects the dead one.
func TestRetryOnConnectionFailure(t *testing.T) {
	e := newEnv(t)
	live := echoServer(t, "live")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	r := rule(prefix("/"), "ns/b")
	r.Retry = &pb.RetryPolicy{MaxRetries: 2, RetryOn: []string{"connection-failure"}}
	b := backendOf("ns/b", deadAddr, hostport(live))
	b.LbPolicy = pb.LBPolicy_LB_POLICY_ROUND_ROBIN
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{b}))
	c := &http.Client{}
	for i := range 20 {
		resp, got, body := get(t, c, "http://"+e.addr+"/")
		if resp.StatusCode != 200 || got.Backend != "live" {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}

	m := e.p.metrics
	if n := testutil.ToFloat64(m.requests.WithLabelValues("ns/gw/l", "ns/r", "ns/b", "200")); n != 20 {
		t.Errorf("novaedge_http_requests_total{code=200} = %v, want 20", n)
	}
	if n := testutil.ToFloat64(m.upstream.WithLabelValues("ns/b", "connect_failure")); n < 1 {
		t.Errorf("no connect_failure counted in novaedge_upstream_requests_total")
	}
	if n := testutil.ToFloat64(m.retries.WithLabelValues("ns/b")); n < 1 {
		t.Errorf("no retry counted in novaedge_upstream_retries_total")
	}

	// Without retries, requests to the dead endpoint fail with 502 and one
	// log line naming route, backend and endpoint.
	r.Retry = nil
	s := e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/b", deadAddr)})
	s.Version = 2
	e.mustApply(s)
	resp, _, _ := get(t, c, "http://"+e.addr+"/")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("dead endpoint without retry: %d, want 502", resp.StatusCode)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "upstream request failed") || !strings.Contains(logs, "backend=ns/b") || !strings.Contains(logs, "endpoint="+deadAddr) {
		t.Fatalf("no log line naming the backend and endpoint:\n%s", logs)
	}
}

func TestTimeoutsAndGRPCErrors(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	r := rule(prefix("/"), "ns/slow")
	r.Timeouts = &pb.RouteTimeouts{RequestMs: 100}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/slow", hostport(slow))}))
	resp, _, _ := get(t, &http.Client{}, "http://"+e.addr+"/")
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("request timeout: %d, want 504", resp.StatusCode)
	}

	// A gRPC call gets a gRPC status, not an HTML page.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.addr+"/pkg.Svc/Method", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" {
		t.Fatalf("gRPC timeout: HTTP %d grpc-status %q, want 200 and 4 (DEADLINE_EXCEEDED)", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
}

func TestCircuitBreakerMaxRequests(t *testing.T) {
	e := newEnv(t)
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	defer slow.Close()
	b := backendOf("ns/slow", hostport(slow))
	b.CircuitBreaker = &pb.CircuitBreaker{MaxRequests: 1}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/slow"))}, []*pb.Backend{b}))
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + e.addr + "/")
		if err != nil {
			done <- -1
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	resp, _, _ := get(t, &http.Client{}, "http://"+e.addr+"/")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Novaedge-Overloaded") != "true" {
		t.Fatalf("second request: %d, want 503 overloaded", resp.StatusCode)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("first request: %d", code)
	}
}

// TestWebSocketUpgrade: an Upgrade request reaches the backend and the
// connection is spliced both ways after 101.
func TestWebSocketUpgrade(t *testing.T) {
	e := newEnv(t)
	ws := wsEchoServer(t)
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/ws"))}, []*pb.Backend{backendOf("ns/ws", ws)}))
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, msg := range []string{"hello\n", "again\n"} {
		_, _ = io.WriteString(c, msg)
		got, err := br.ReadString('\n')
		if err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("echo %q: %q %v", msg, got, err)
		}
	}
}

// TestReloadKeepsConnectionsAndSwitchesConfig: a keep-alive connection
// opened before a reload stays open, and its next request sees the new
// configuration; a listener removed closes its socket.
func TestReloadKeepsConnectionsAndSwitchesConfig(t *testing.T) {
	e := newEnv(t)
	a, b := echoServer(t, "a"), echoServer(t, "b")
	backends := []*pb.Backend{backendOf("ns/a", hostport(a)), backendOf("ns/b", hostport(b))}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, backends))

	var dials atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, n, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, n, addr)
	}}
	c := &http.Client{Transport: tr}
	if _, got, _ := get(t, c, "http://"+e.addr+"/"); got.Backend != "a" {
		t.Fatalf("before: %+v", got)
	}
	s := e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/b"))}, backends)
	s.Version = 2
	e.mustApply(s)
	if _, got, _ := get(t, c, "http://"+e.addr+"/"); got.Backend != "b" {
		t.Fatalf("after the reload: %+v, want backend b", got)
	}
	if dials.Load() != 1 {
		t.Fatalf("%d dials: the reload closed the client's keep-alive connection", dials.Load())
	}
	// A bad snapshot is rejected by Compile and changes nothing.
	bad := e.snap(pb.Protocol_PROTOCOL_HTTPS, &pb.ListenerTLS{Certificates: []string{"ns/none"}}, nil, nil)
	if err := e.apply(bad); err == nil || !strings.Contains(err.Error(), "ns/none") {
		t.Fatalf("bad snapshot: %v", err)
	}
	if _, got, _ := get(t, c, "http://"+e.addr+"/"); got.Backend != "b" {
		t.Fatalf("after a rejected snapshot: %+v", got)
	}
	// Removing the listener closes the socket.
	e.mustApply(&pb.ConfigSnapshot{Version: 3, Cluster: &pb.ClusterConfig{}})
	tr.CloseIdleConnections()
	if conn, err := net.DialTimeout("tcp", e.addr, time.Second); err == nil {
		_ = conn.Close()
		t.Fatal("the removed listener's socket still accepts connections")
	}
	_ = strconv.Itoa
}

// TestRetryWithBody: a small request body is replayed on the retry, so a
// POST allowed to retry reaches the live endpoint with its body intact.
func TestRetryWithBody(t *testing.T) {
	e := newEnv(t)
	live := echoServer(t, "live")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	r := rule(prefix("/"), "ns/b")
	r.Retry = &pb.RetryPolicy{MaxRetries: 2, RetryOn: []string{"connection-failure"}, RetryNonIdempotent: true}
	b := backendOf("ns/b", deadAddr, hostport(live))
	b.LbPolicy = pb.LBPolicy_LB_POLICY_ROUND_ROBIN
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{b}))
	for i := range 6 {
		resp, err := http.Post("http://"+e.addr+"/", "text/plain", strings.NewReader("payload-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var got echo
		_ = json.Unmarshal(raw, &got)
		if resp.StatusCode != 200 || got.Body != "payload-"+strconv.Itoa(i) {
			t.Fatalf("POST %d: %d body %q", i, resp.StatusCode, got.Body)
		}
	}
}
