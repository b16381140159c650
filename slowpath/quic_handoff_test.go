package slowpath

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// h3Client is an HTTP/3 client that counts the QUIC connections it dials
// and keeps the last one, so a test can tell that requests shared one. Its
// connections share one UDP socket that outlives them, so that closing a
// connection reliably sends CONNECTION_CLOSE (a per-connection socket can
// close before the frame leaves).
type h3Client struct {
	*http.Client
	tr    *http3.Transport
	qtr   *quic.Transport
	dials atomic.Int64
	conn  atomic.Pointer[quic.Conn]
}

func newH3Client(t *testing.T, tlsConf *tls.Config) *h3Client {
	t.Helper()
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c := &h3Client{qtr: &quic.Transport{Conn: udp}}
	c.tr = &http3.Transport{
		TLSClientConfig: tlsConf,
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			c.dials.Add(1)
			ua, err := net.ResolveUDPAddr("udp4", addr)
			if err != nil {
				return nil, err
			}
			conn, err := c.qtr.DialEarly(ctx, ua, tlsCfg, cfg)
			if err == nil {
				c.conn.Store(conn)
			}
			return conn, err
		},
	}
	c.Client = &http.Client{Transport: c.tr}
	t.Cleanup(func() {
		_ = c.tr.Close()
		_ = c.qtr.Close()
		_ = udp.Close()
	})
	return c
}

// leave closes the client's connections (CONNECTION_CLOSE) and waits
// until the last one has ended.
func (c *h3Client) leave(t *testing.T) {
	t.Helper()
	_ = c.tr.Close()
	if conn := c.conn.Load(); conn != nil {
		select {
		case <-conn.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("client connection still open after Close")
		}
	}
}

// agentOf GETs url and returns the X-Agent header of the answer (which
// slow path served it); a request that takes longer than 10s fails.
func (c *h3Client) agentOf(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("HTTP/3 GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/3.0" {
		t.Fatalf("HTTP/3 GET %s: %d %s", url, resp.StatusCode, resp.Proto)
	}
	return resp.Header.Get("X-Agent")
}

// udpSocketsOn counts the UDP sockets of this network namespace bound to
// 127.0.0.1:port (/proc/net/udp).
func udpSocketsOn(t *testing.T, port uint16) int {
	t.Helper()
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	want := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[1] == want {
			n++
		}
	}
	return n
}

// h3Snapshot serves HTTP/3 on 127.0.0.1:port with the certificate given,
// proxying to backend and answering X-Agent: agent, so a test can tell
// which slow path served a request.
func h3Snapshot(port uint16, agent, backend string, certPEM, keyPEM []byte) *pb.ConfigSnapshot {
	tlsCfg := &pb.ListenerTLS{Certificates: []string{"ns/c"}}
	l := &pb.Listener{Name: "ns/gw/h3", Gateway: "ns/gw", Addresses: []string{"127.0.0.1"}, Port: uint32(port), Protocol: pb.Protocol_PROTOCOL_HTTP3, Tls: tlsCfg, Routes: []string{"ns/r"}}
	r := rule(prefix("/"), "ns/a")
	r.Filters = []*pb.RouteFilter{{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Agent", Value: agent}}}}}}
	rt := route("ns/r", r)
	rt.Listeners = []string{l.Name}
	rt.Kind = pb.RouteKind_ROUTE_KIND_HTTP
	return &pb.ConfigSnapshot{Version: 1, Cluster: &pb.ClusterConfig{
		Listeners:    []*pb.Listener{l},
		Routes:       []*pb.Route{rt},
		Backends:     []*pb.Backend{backendOf("ns/a", backend)},
		Certificates: []*pb.Certificate{{Name: "ns/c", CertPem: certPEM, KeyPem: keyPEM}},
	}}
}

// quicHandoff is an HTTP/3 listener on 127.0.0.1 served by an old slow
// path (generation 0, route answering X-Agent: old) and handed to a
// successor (generation 1, X-Agent: new) the way an agent upgrade does;
// before is a client whose connection was opened (and used) before the
// handoff.
type quicHandoff struct {
	port      uint16
	url       string
	clientTLS *tls.Config
	before    *h3Client
	oldSet    *sockets.Set
	newSet    *sockets.Set
	next      *Proxy
	nextReg   *prometheus.Registry // the successor's metrics
	closeOld  func()               // the old agent stops: Proxy.Close, which drains
	oldClosed chan struct{}        // closed when the old slow path's Close returned
}

func newQUICHandoff(t *testing.T, drain time.Duration) *quicHandoff {
	t.Helper()
	probe, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &quicHandoff{port: uint16(probe.LocalAddr().(*net.UDPAddr).Port), oldClosed: make(chan struct{})}
	_ = probe.Close()
	key := sockets.Key{Network: "udp", Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), h.port)}
	h.url = "https://" + key.Addr.String() + "/"

	ca, _ := testcert.NewCA("test")
	certPEM, keyPEM, _ := ca.Leaf("h3.test")
	h.clientTLS = &tls.Config{ServerName: "h3.test", RootCAs: ca.Pool()}
	be := hostport(echoServer(t, "a"))
	snap := func(agent string) *pb.ConfigSnapshot { return h3Snapshot(h.port, agent, be, certPEM, keyPEM) }
	logs := &lockedBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("slow path log:\n%s", logs.String())
		}
	})
	newProxy := func(name string, set *sockets.Set, reg *prometheus.Registry) *Proxy {
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("proxy", name)
		return New(Options{Sockets: set, Logger: log, DrainTimeout: drain, Registry: reg})
	}
	apply := func(p *Proxy, s *pb.ConfigSnapshot) {
		t.Helper()
		ch, err := p.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	h.oldSet = sockets.NewSet()
	old := newProxy("old", h.oldSet, prometheus.NewRegistry())
	h.closeOld = func() { old.Close(); close(h.oldClosed) }
	t.Cleanup(func() {
		select {
		case <-h.oldClosed:
		default:
			h.closeOld()
		}
	})
	apply(old, snap("old"))
	if sock, ok := h.oldSet.Get(key); !ok || !sock.Steered() {
		t.Fatalf("old slow path's socket %s is not steered (see the log)", key)
	}
	h.before = newH3Client(t, h.clientTLS)
	if got := h.before.agentOf(t, h.url); got != "old" {
		t.Fatalf("before the handoff: served by %q", got)
	}

	// The handoff, as between two agent processes.
	path := filepath.Join(t.TempDir(), "handoff.sock")
	handedOff := make(chan struct{})
	go func() { _ = h.oldSet.ServeHandoff(context.Background(), path, func() { close(handedOff) }) }()
	h.newSet = sockets.NewSet()
	h.nextReg = prometheus.NewRegistry()
	h.next = newProxy("new", h.newSet, h.nextReg)
	t.Cleanup(h.next.Close)
	var (
		keys    []sockets.Key
		confirm func() error
	)
	for deadline := time.Now().Add(10 * time.Second); ; {
		keys, confirm, err = h.newSet.Inherit(path)
		if !errors.Is(err, sockets.ErrNoPredecessor) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Fatalf("Inherit: %v %v", keys, err)
	}
	if g := h.newSet.Generation(); g != 1 {
		t.Fatalf("successor generation %d, want 1", g)
	}
	apply(h.next, snap("new"))
	if err := confirm(); err != nil {
		t.Fatal(err)
	}
	<-handedOff
	go h.closeOld() // the old agent stops and drains
	return h
}

// TestQUICHandoffKeepsConnections: a client connection opened before the
// handoff completes further requests afterwards, on the same QUIC
// connection, still served by the old slow path, while a new connection is
// served by the successor. The old slow path's Close drains: it returns
// once that client has gone (long before its drain timeout) and leaves
// only the successor's socket on the port; the successor's Close leaves
// none.
func TestQUICHandoffKeepsConnections(t *testing.T) {
	// A long drain: the old slow path must finish because its connections
	// ended, not because time ran out.
	h := newQUICHandoff(t, time.Minute)
	conn := h.before.conn.Load()
	for i := range 20 {
		if got := h.before.agentOf(t, h.url); got != "old" {
			t.Fatalf("request %d after the handoff on the old connection: served by %q, want old", i, got)
		}
	}
	if n := h.before.dials.Load(); n != 1 || h.before.conn.Load() != conn || conn.Context().Err() != nil {
		t.Fatalf("the old client dialed %d connections across the handoff; want its one connection kept", n)
	}
	after := newH3Client(t, h.clientTLS)
	for i := range 5 {
		if got := after.agentOf(t, h.url); got != "new" {
			t.Fatalf("request %d on a new connection: served by %q, want new", i, got)
		}
	}
	select {
	case <-h.oldClosed:
		t.Fatal("the old slow path stopped while its client was still connected")
	default:
	}
	// The group's counters, as the successor exports them: the old
	// client's datagrams went by their connection IDs, the new client's
	// first ones to the newest generation.
	sock := sockets.Key{Network: "udp", Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), h.port)}.String()
	for _, via := range []string{"connection_id", "newest"} {
		if n := steered(t, h.nextReg, sock, via); n == 0 {
			t.Errorf("novaedge_quic_steered_datagrams_total{socket=%q,via=%q} is 0", sock, via)
		}
	}

	// The old client leaves; the old slow path finishes draining and
	// closes its socket.
	h.before.leave(t)
	select {
	case <-h.oldClosed:
	case <-time.After(25 * time.Second): // half the drain timeout is 30s
		t.Fatal("the old slow path still drains after its last client left")
	}
	if n := udpSocketsOn(t, h.port); n != 1 {
		t.Fatalf("%d UDP sockets on port %d after the old slow path closed, want the successor's 1", n, h.port)
	}
	if got := after.agentOf(t, h.url); got != "new" {
		t.Fatalf("after the old slow path closed: served by %q", got)
	}
	h.next.Close()
	if n := udpSocketsOn(t, h.port); n != 0 {
		t.Fatalf("%d UDP sockets left on port %d after both slow paths closed", n, h.port)
	}
}

// TestQUICHandoffDrainEnds: a client that keeps its connection to the old
// slow path open does not keep the old agent alive. After half the drain
// timeout it gets GOAWAY, its connection closes, the old slow path's Close
// returns and closes its socket, and the client's next request goes over a
// new connection to the successor.
func TestQUICHandoffDrainEnds(t *testing.T) {
	h := newQUICHandoff(t, 2*time.Second)
	if got := h.before.agentOf(t, h.url); got != "old" {
		t.Fatalf("after the handoff on the old connection: served by %q, want old", got)
	}
	conn := h.before.conn.Load()
	select {
	case <-h.oldClosed:
	case <-time.After(20 * time.Second):
		t.Fatal("the old slow path drains past its drain timeout")
	}
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the old connection is still open after the old slow path closed")
	}
	if n := udpSocketsOn(t, h.port); n != 1 {
		t.Fatalf("%d UDP sockets on port %d after the old slow path closed, want the successor's 1", n, h.port)
	}
	if got := h.before.agentOf(t, h.url); got != "new" {
		t.Fatalf("after the drain: served by %q, want new", got)
	}
	if n := h.before.dials.Load(); n != 2 {
		t.Fatalf("the client dialed %d connections, want 2 (the old one, then one to the successor)", n)
	}
}

// steered reads novaedge_quic_steered_datagrams_total{socket, via} from reg
// (failing when the series is missing).
func steered(t *testing.T, reg *prometheus.Registry, socket, via string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "novaedge_quic_steered_datagrams_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["socket"] == socket && labels["via"] == via {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series novaedge_quic_steered_datagrams_total{socket=%q,via=%q}", socket, via)
	return 0
}
