package slowpath

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// tcpEcho answers each line with "<name>:<line>".
func tcpEcho(t *testing.T, name string, cfg *tls.Config) string {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	if cfg != nil {
		ln, err = tls.Listen("tcp", "127.0.0.1:0", cfg)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = io.WriteString(c, name+":"+line)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// l4Snap is a snapshot with one L4 listener on the env's port, planned for
// the slow path.
func (e *env) l4Snap(proto pb.Protocol, tlsCfg *pb.ListenerTLS, routes []*pb.Route, backends []*pb.Backend, certs ...*pb.Certificate) *pb.ConfigSnapshot {
	s := e.snap(proto, tlsCfg, nil, backends, certs...)
	l := s.Cluster.Listeners[0]
	for _, r := range routes {
		r.Listeners = []string{l.Name}
		l.Routes = append(l.Routes, r.Name)
	}
	s.Cluster.Routes = routes
	s.Cluster.Plan = []*pb.PlanEntry{{Listener: l.Name, Address: "127.0.0.1", Port: e.port, Path: pb.DataPath_DATA_PATH_SLOW}}
	return s
}

func mkL4Route(name string, kind pb.RouteKind, hostnames []string, backends ...string) *pb.Route {
	r := &pb.Route{Name: name, Kind: kind, Hostnames: hostnames, Rules: []*pb.RouteRule{{}}}
	for _, b := range backends {
		r.Rules[0].Backends = append(r.Rules[0].Backends, &pb.WeightedBackend{Backend: b, Weight: 1})
	}
	return r
}

func lineRoundTrip(t *testing.T, c net.Conn, line string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", line, err)
	}
	return strings.TrimSpace(got)
}

func TestTCPListener(t *testing.T) {
	e := newEnv(t)
	up := tcpEcho(t, "echo", nil)
	e.mustApply(e.l4Snap(pb.Protocol_PROTOCOL_TCP, nil, []*pb.Route{mkL4Route("ns/r#tcp", pb.RouteKind_ROUTE_KIND_TCP, nil, "ns/echo")}, []*pb.Backend{backendOf("ns/echo", up)}))
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got := lineRoundTrip(t, c, "hello"); got != "echo:hello" {
		t.Fatalf("got %q", got)
	}

	// Without a plan entry (the fast path's listener) the slow path leaves
	// it alone, unless told to serve the fast path's share.
	s := e.l4Snap(pb.Protocol_PROTOCOL_TCP, nil, []*pb.Route{mkL4Route("ns/r#tcp", pb.RouteKind_ROUTE_KIND_TCP, nil, "ns/echo")}, []*pb.Backend{backendOf("ns/echo", up)})
	s.Cluster.Plan[0].Path = pb.DataPath_DATA_PATH_FAST
	s.Version = 2
	e.mustApply(s)
	if keys := e.p.Keys(); len(keys) != 0 {
		t.Fatalf("sockets %v for a fast-path listener", keys)
	}
}

func TestTLSPassthroughBySNI(t *testing.T) {
	e := newEnv(t)
	ca, _ := testcert.NewCA("test")
	mk := func(name string) *tls.Config {
		cp, kp, _ := ca.Leaf(name)
		pair, _ := tls.X509KeyPair(cp, kp)
		return &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	a := tcpEcho(t, "a", mk("a.test"))
	b := tcpEcho(t, "b", mk("*.b.test"))
	def := tcpEcho(t, "default", mk("other.test"))
	e.mustApply(e.l4Snap(pb.Protocol_PROTOCOL_TLS, &pb.ListenerTLS{Passthrough: true},
		[]*pb.Route{
			mkL4Route("ns/a#tls", pb.RouteKind_ROUTE_KIND_TLS, []string{"a.test"}, "ns/a"),
			mkL4Route("ns/b#tls", pb.RouteKind_ROUTE_KIND_TLS, []string{"*.b.test"}, "ns/b"),
			mkL4Route("ns/default#tls", pb.RouteKind_ROUTE_KIND_TLS, nil, "ns/default"),
		},
		[]*pb.Backend{backendOf("ns/a", a), backendOf("ns/b", b), backendOf("ns/default", def)}))
	for _, tc := range []struct{ sni, want string }{{"a.test", "a"}, {"x.b.test", "b"}, {"other.test", "default"}} {
		c, err := tls.Dial("tcp", e.addr, &tls.Config{ServerName: tc.sni, RootCAs: ca.Pool()})
		if err != nil {
			t.Fatalf("SNI %s: %v (the backend's certificate must verify end to end)", tc.sni, err)
		}
		if got := lineRoundTrip(t, c, "hi"); got != tc.want+":hi" {
			t.Errorf("SNI %s reached %q, want %s", tc.sni, got, tc.want)
		}
		_ = c.Close()
	}
}

func TestTLSTerminateToTCP(t *testing.T) {
	e := newEnv(t)
	ca, _ := testcert.NewCA("test")
	cp, kp, _ := ca.Leaf("t.test")
	up := tcpEcho(t, "plain", nil)
	e.mustApply(e.l4Snap(pb.Protocol_PROTOCOL_TLS, &pb.ListenerTLS{Certificates: []string{"ns/c"}},
		[]*pb.Route{mkL4Route("ns/r#tcp", pb.RouteKind_ROUTE_KIND_TCP, nil, "ns/p")}, []*pb.Backend{backendOf("ns/p", up)},
		&pb.Certificate{Name: "ns/c", CertPem: cp, KeyPem: kp}))
	c, err := tls.Dial("tcp", e.addr, &tls.Config{ServerName: "t.test", RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if got := lineRoundTrip(t, c, "secret"); got != "plain:secret" {
		t.Fatalf("got %q", got)
	}
}

func TestUDPListener(t *testing.T) {
	e := newEnv(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(int(e.port)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.socks.Adopt(&sockets.Socket{Key: sockets.Key{Network: "udp", Addr: netip.MustParseAddrPort(pc.LocalAddr().String())}, PacketConn: pc}); err != nil {
		t.Fatal(err)
	}
	// The adopted TCP socket of the env is not used by a UDP listener.
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.Close() }()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = up.WriteTo(append([]byte("udp:"), buf[:n]...), from)
		}
	}()
	e.mustApply(e.l4Snap(pb.Protocol_PROTOCOL_UDP, nil, []*pb.Route{mkL4Route("ns/r#udp", pb.RouteKind_ROUTE_KIND_UDP, nil, "ns/u")}, []*pb.Backend{backendOf("ns/u", up.LocalAddr().String())}))
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 100)
	for _, msg := range []string{"one", "two"} {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "udp:"+msg {
			t.Fatalf("reply to %q: %q %v", msg, buf[:n], err)
		}
	}
}
