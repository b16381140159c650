package slowpath

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// TestReloadUnderLoad: continuous HTTPS requests, an open WebSocket and an
// open gRPC bidi stream while 100 reloads each change the routes (a
// response header carrying the version), the weights, a backend's
// endpoint set, a second listener (added and removed) and the
// certificate. No request fails, no stream is cut, and the first request
// after each reload sees the new version.
func TestReloadUnderLoad(t *testing.T) {
	e := newEnv(t)
	ca, _ := testcert.NewCA("test")
	certs := make([]*pb.Certificate, 2)
	for i := range certs {
		cp, kp, _ := ca.Leaf("lb.test")
		certs[i] = &pb.Certificate{Name: "ns/cert", CertPem: cp, KeyPem: kp}
	}
	b1, b2 := echoServer(t, "b1"), echoServer(t, "b2")
	ws := wsEchoServer(t)
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, testService{})
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()

	// A second listener's port, added and removed by the reloads.
	extra, _ := net.Listen("tcp", "127.0.0.1:0")
	extraPort := uint32(netip.MustParseAddrPort(extra.Addr().String()).Port())
	_ = extra.Close()

	snap := func(v int) *pb.ConfigSnapshot {
		gen := rule(prefix("/gen"), "ns/pool")
		gen.Filters = []*pb.RouteFilter{{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Gen", Value: strconv.Itoa(v)}}}}}}
		stable := rule(prefix("/stable"), "ns/pool", "ns/b2")
		stable.Backends[0].Weight, stable.Backends[1].Weight = uint32(1+v%3), uint32(1+(v+1)%3)
		routes := []*pb.Route{route("ns/r", gen, stable, rule(prefix("/ws"), "ns/ws"), rule(prefix("/grpc.testing.TestService/"), "ns/grpc"))}
		pool := backendOf("ns/pool", hostport(b1))
		if v%2 == 1 {
			pool = backendOf("ns/pool", hostport(b1), hostport(b2))
		}
		grpcBe := backendOf("ns/grpc", gl.Addr().String())
		grpcBe.Protocol = "GRPC"
		s := e.snap(pb.Protocol_PROTOCOL_HTTPS, &pb.ListenerTLS{Certificates: []string{"ns/cert"}}, routes,
			[]*pb.Backend{pool, backendOf("ns/b2", hostport(b2)), backendOf("ns/ws", ws), grpcBe}, certs[v%2])
		s.Version = uint64(v)
		if v%2 == 0 {
			l2 := &pb.Listener{Name: "ns/gw/extra", Gateway: "ns/gw", Addresses: []string{"127.0.0.1"}, Port: extraPort, Protocol: pb.Protocol_PROTOCOL_HTTP, Routes: []string{"ns/r"}}
			s.Cluster.Listeners = append(s.Cluster.Listeners, l2)
			s.Cluster.Routes[0].Listeners = append(s.Cluster.Routes[0].Listeners, l2.Name)
		}
		return s
	}
	e.mustApply(snap(0))

	clientTLS := &tls.Config{ServerName: "lb.test", RootCAs: ca.Pool()}
	// Each transport gets its own tls.Config: configuring HTTP/2 adds "h2"
	// to the config's NextProtos.
	tr := &http.Transport{TLSClientConfig: clientTLS.Clone(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "https://" + e.addr

	// Continuous load.
	ctx, stop := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		requests atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
	)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := client.Get(base + "/stable")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				requests.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}

	// A WebSocket through the proxy, kept open across every reload.
	wsConn, wsr := dialWS(t, e.addr, clientTLS)
	defer func() { _ = wsConn.Close() }()
	// A gRPC bidi stream over TLS through the same listener.
	gc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gc.Close() }()
	bidi, err := testpb.NewTestServiceClient(gc).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}

	defer func() { stop(); wg.Wait() }()
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS.Clone(), DisableKeepAlives: true}}
	seenCerts := map[string]bool{}
	for v := 1; v <= 100; v++ {
		e.mustApply(snap(v))
		resp, err := fresh.Get(base + "/gen")
		if err != nil {
			t.Fatalf("reload %d: %v", v, err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Get("X-Gen"); got != strconv.Itoa(v) {
			t.Fatalf("reload %d: the first request after it saw version %q", v, got)
		}
		seenCerts[string(resp.TLS.PeerCertificates[0].Raw)] = true
		msg := fmt.Sprintf("msg-%d\n", v)
		if _, err := io.WriteString(wsConn, msg); err != nil {
			t.Fatalf("reload %d: WebSocket write: %v", v, err)
		}
		if got, err := wsr.ReadString('\n'); err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("reload %d: WebSocket cut: %q %v", v, got, err)
		}
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(msg)}}); err != nil {
			t.Fatalf("reload %d: gRPC send: %v", v, err)
		}
		if got, err := bidi.Recv(); err != nil || string(got.GetPayload().GetBody()) != msg {
			t.Fatalf("reload %d: gRPC stream cut: %v", v, err)
		}
		if v%2 == 0 {
			if r, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(extraPort)) + "/gen"); err != nil {
				t.Fatalf("reload %d: the added listener does not serve: %v", v, err)
			} else {
				_ = r.Body.Close()
			}
		}
	}
	stop()
	wg.Wait()
	if len(seenCerts) != 2 {
		t.Errorf("served %d distinct certificates, want the 2 the reloads alternate", len(seenCerts))
	}
	if failures.Load() != 0 {
		t.Fatalf("%d of %d requests failed during 100 reloads; first: %v", failures.Load(), requests.Load(), firstErr.Load())
	}
	if requests.Load() < 100 {
		t.Fatalf("only %d requests ran during the reloads", requests.Load())
	}
	t.Logf("%d requests, 0 failed, across 100 reloads", requests.Load())
}

// wsEchoServer answers an Upgrade with 101 and echoes lines upper-cased;
// a request without "Upgrade: websocket" gets 400.
func wsEchoServer(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.WriteString(strings.ToUpper(line))
			_ = brw.Flush()
		}
	}))
	t.Cleanup(s.Close)
	return hostport(s)
}

func dialWS(t *testing.T, addr string, cfg *tls.Config) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: cfg.ServerName, RootCAs: cfg.RootCAs, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: lb.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("WebSocket upgrade: %v %v", resp, err)
	}
	return c, br
}

// TestRestartUnderLoad hands the listening socket from one slow path to a
// successor (SCM_RIGHTS over a Unix socket, as between an agent and its
// replacement) while clients open a new connection per request: no
// connection is refused and no request fails.
func TestRestartUnderLoad(t *testing.T) {
	e := newEnv(t)
	be := echoServer(t, "a")
	gen := func(name string) *pb.ConfigSnapshot {
		r := rule(prefix("/"), "ns/a")
		r.Filters = []*pb.RouteFilter{{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Agent", Value: name}}}}}}
		return e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/a", hostport(be))})
	}
	e.mustApply(gen("old"))
	path := t.TempDir() + "/handoff.sock"
	handedOff := make(chan struct{})
	go func() {
		_ = e.p.socks.ServeHandoff(context.Background(), path, func() { close(handedOff) })
	}()

	ctx, stop := context.WithCancel(context.Background())
	var (
		wg               sync.WaitGroup
		ok, failed       atomic.Int64
		seenOld, seenNew atomic.Bool
		firstErr         atomic.Value
	)
	tr := &http.Transport{DisableKeepAlives: true}
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := (&http.Client{Transport: tr}).Get("http://" + e.addr + "/")
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.Header.Get("X-Agent") {
				case "old":
					seenOld.Store(true)
				case "new":
					seenNew.Store(true)
				}
				ok.Add(1)
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	for ok.Load() < 50 {
		time.Sleep(5 * time.Millisecond)
	}

	// The successor: its own socket set, inheriting from the predecessor.
	set := sockets.NewSet()
	next := New(Options{Sockets: set})
	defer next.Close()
	var (
		keys    []sockets.Key
		confirm func() error
		err     error
	)
	for range 500 {
		if keys, confirm, err = set.Inherit(path); !errors.Is(err, sockets.ErrNoPredecessor) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || len(keys) != 1 {
		t.Fatalf("Inherit: %v %v", keys, err)
	}
	ch, err := next.Compile(gen("new"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := confirm(); err != nil {
		t.Fatal(err)
	}
	<-handedOff
	e.p.Close() // the predecessor stops: closes its copy of the socket, drains
	before := ok.Load()
	for ok.Load() < before+200 {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed across the handoff (first: %v)", failed.Load(), firstErr.Load())
	}
	if !seenOld.Load() || !seenNew.Load() {
		t.Fatalf("served by old %v, new %v: want both", seenOld.Load(), seenNew.Load())
	}
	t.Logf("%d requests, 0 failed, across the handoff", ok.Load())
	_ = x509.ParseCertificate
}
