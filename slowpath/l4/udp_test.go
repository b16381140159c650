package l4

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for exact idle expiry.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// udpUpstream is a loopback UDP server. It answers each datagram with
// "name|source address|payload" (or the bare payload when raw) and records
// how many datagrams it got.
type udpUpstream struct {
	name string
	addr string
	mu   sync.Mutex
	got  int
}

func startUDPUpstream(t *testing.T, name string, raw bool) *udpUpstream {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	u := &udpUpstream{name: name, addr: c.LocalAddr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { _ = c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.got++
			u.mu.Unlock()
			reply := buf[:n]
			if !raw {
				reply = fmt.Appendf(nil, "%s|%s|%s", name, from, buf[:n])
			}
			_, _ = c.WriteToUDPAddrPort(reply, from)
		}
	}()
	return u
}

func (u *udpUpstream) received() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got
}

// picker records Pick calls and maps client addresses to upstreams.
type picker struct {
	mu     sync.Mutex
	routes map[netip.AddrPort]string
	calls  map[netip.AddrPort]int
}

func newPicker() *picker {
	return &picker{routes: map[netip.AddrPort]string{}, calls: map[netip.AddrPort]int{}}
}

func (p *picker) route(client *net.UDPConn, upstream string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[client.LocalAddr().(*net.UDPAddr).AddrPort()] = upstream
}

func (p *picker) Pick(client netip.AddrPort) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[client]++
	up, ok := p.routes[client]
	return up, ok
}

func (p *picker) callsFor(client *net.UDPConn) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[client.LocalAddr().(*net.UDPAddr).AddrPort()]
}

// startUDPProxy runs u on a fresh loopback socket until the test ends and
// returns the socket's address.
func startUDPProxy(t *testing.T, u *UDPProxy) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	u.Conn = c
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- u.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = c.Close()
	})
	return c.LocalAddr().String()
}

func udpClient(t *testing.T, proxy string) *net.UDPConn {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// exchange sends msg and returns the reply's fields: upstream name, the
// source address the upstream saw, and the echoed payload.
func exchange(t *testing.T, c *net.UDPConn, msg string) (name, via, payload string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	check(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reply to %q: %v", msg, err)
	}
	parts := strings.SplitN(string(buf[:n]), "|", 3)
	if len(parts) != 3 {
		t.Fatalf("reply %q", buf[:n])
	}
	return parts[0], parts[1], parts[2]
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitFor); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUDPProxyRoutesRepliesPerClient(t *testing.T) {
	up1 := startUDPUpstream(t, "up1", false)
	up2 := startUDPUpstream(t, "up2", false)
	p := newPicker()
	u := &UDPProxy{Pick: p.Pick}
	proxy := startUDPProxy(t, u)
	a, b := udpClient(t, proxy), udpClient(t, proxy)
	p.route(a, up1.addr)
	p.route(b, up2.addr)

	vias := map[string]map[string]bool{} // client -> upstream-side source addresses
	for i := range 5 {
		for _, tc := range []struct {
			client *net.UDPConn
			label  string
			want   string
		}{{a, "a", "up1"}, {b, "b", "up2"}} {
			msg := fmt.Sprintf("%s-%d", tc.label, i)
			name, via, payload := exchange(t, tc.client, msg)
			if name != tc.want || payload != msg {
				t.Errorf("client %s sent %q, got reply from %s with %q", tc.label, msg, name, payload)
			}
			if vias[tc.label] == nil {
				vias[tc.label] = map[string]bool{}
			}
			vias[tc.label][via] = true
		}
	}
	// One session per client: a single upstream socket each, distinct.
	if len(vias["a"]) != 1 || len(vias["b"]) != 1 {
		t.Errorf("upstream sockets per client: %v", vias)
	}
	if p.callsFor(a) != 1 || p.callsFor(b) != 1 {
		t.Errorf("Pick calls: a %d, b %d, want 1 each", p.callsFor(a), p.callsFor(b))
	}
	st := u.Stats()
	if st.Sessions != 2 || st.SessionsCreated != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestUDPProxyIdleExpiryExact(t *testing.T) {
	up := startUDPUpstream(t, "up", false)
	clock := newFakeClock()
	p := newPicker()
	// The sweeper runs every Idle/4 = 15 minutes of real time, so within
	// the test only the explicit expire calls below end sessions.
	u := &UDPProxy{Pick: p.Pick, Idle: time.Hour, Now: clock.Now}
	proxy := startUDPProxy(t, u)
	a, b := udpClient(t, proxy), udpClient(t, proxy)
	p.route(a, up.addr)
	p.route(b, up.addr)

	_, viaA, _ := exchange(t, a, "a1")
	exchange(t, b, "b1")
	clock.Advance(59 * time.Minute)
	if n := u.expire(clock.Now()); n != 0 {
		t.Fatalf("expired %d sessions before Idle", n)
	}
	exchange(t, a, "a2") // a active at 59m, b last active at 0m
	clock.Advance(time.Minute)
	if n := u.expire(clock.Now()); n != 1 {
		t.Fatalf("expired %d sessions at exactly Idle after b's last datagram, want 1", n)
	}
	if got := u.Sessions(); got != 1 {
		t.Fatalf("Sessions() = %d, want 1", got)
	}
	// a keeps its session (same upstream socket, no new Pick) ...
	if _, via, _ := exchange(t, a, "a3"); via != viaA {
		t.Errorf("a's upstream socket changed from %s to %s", viaA, via)
	}
	// ... b gets a new one, picked again.
	exchange(t, b, "b2")
	if p.callsFor(a) != 1 || p.callsFor(b) != 2 {
		t.Errorf("Pick calls: a %d, b %d, want 1 and 2", p.callsFor(a), p.callsFor(b))
	}
	clock.Advance(time.Hour)
	if n := u.expire(clock.Now()); n != 2 {
		t.Errorf("expired %d sessions after an idle hour, want 2", n)
	}
	if st := u.Stats(); st.Sessions != 0 || st.SessionsCreated != 3 || st.SessionsExpired != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestUDPProxyIdleExpiryRealClock(t *testing.T) {
	up := startUDPUpstream(t, "up", false)
	p := newPicker()
	u := &UDPProxy{Pick: p.Pick, Idle: 20 * time.Millisecond}
	proxy := startUDPProxy(t, u)
	for range 2 {
		c := udpClient(t, proxy)
		p.route(c, up.addr)
		exchange(t, c, "hi")
	}
	eventually(t, "sessions to expire", func() bool { return u.Sessions() == 0 })
	if st := u.Stats(); st.SessionsExpired != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestUDPProxyMaxSessions(t *testing.T) {
	up := startUDPUpstream(t, "up", false)
	clock := newFakeClock()
	p := newPicker()
	u := &UDPProxy{Pick: p.Pick, MaxSessions: 1, Idle: time.Hour, Now: clock.Now}
	proxy := startUDPProxy(t, u)
	a, b := udpClient(t, proxy), udpClient(t, proxy)
	p.route(a, up.addr)
	p.route(b, up.addr)

	exchange(t, a, "a1")
	if _, err := b.Write([]byte("b1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's datagram to be dropped", func() bool { return u.Stats().DroppedLimit == 1 })
	exchange(t, a, "a2") // the existing session still works
	if got := up.received(); got != 2 {
		t.Errorf("upstream received %d datagrams, want only a's 2", got)
	}
	if p.callsFor(b) != 0 {
		t.Errorf("Pick called %d times for a dropped client", p.callsFor(b))
	}
	if got := u.Sessions(); got != 1 {
		t.Errorf("Sessions() = %d, want 1", got)
	}
	// Once a's session expires there is room for b.
	clock.Advance(time.Hour)
	u.expire(clock.Now())
	if name, _, payload := exchange(t, b, "b2"); name != "up" || payload != "b2" {
		t.Errorf("b got %s %q", name, payload)
	}
}

func TestUDPProxyDrops(t *testing.T) {
	up := startUDPUpstream(t, "up", true)
	p := newPicker()
	u := &UDPProxy{Pick: p.Pick, MaxDatagram: 8}
	proxy := startUDPProxy(t, u)

	// A client Pick refuses.
	refused := udpClient(t, proxy)
	send(t, refused, "x")
	eventually(t, "refused datagram to be counted", func() bool { return u.Stats().DroppedNoUpstream == 1 })

	// A client whose upstream cannot be dialled.
	bad := udpClient(t, proxy)
	p.route(bad, "not an address")
	send(t, bad, "x")
	eventually(t, "dial failure to be counted", func() bool { return u.Stats().DialErrors == 1 })

	// Oversize datagrams are dropped, not truncated; a datagram of exactly
	// MaxDatagram bytes goes through.
	c := udpClient(t, proxy)
	p.route(c, up.addr)
	send(t, c, "123456789")
	eventually(t, "oversize datagram to be counted", func() bool { return u.Stats().DroppedOversize == 1 })
	send(t, c, "12345678")
	check(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "12345678" {
		t.Fatalf("reply %q, %v", buf[:n], err)
	}
	if got := up.received(); got != 1 {
		t.Errorf("upstream received %d datagrams, want 1", got)
	}
	if st := u.Stats(); st.Sessions != 1 || st.DroppedNoUpstream != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestUDPProxyServeEnds(t *testing.T) {
	up := startUDPUpstream(t, "up", false)
	t.Run("context cancelled", func(t *testing.T) {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		p := newPicker()
		u := &UDPProxy{Conn: conn, Pick: p.Pick}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- u.Serve(ctx) }()
		c := udpClient(t, conn.LocalAddr().String())
		p.route(c, up.addr)
		exchange(t, c, "hi")
		cancel()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if got := u.Sessions(); got != 0 {
			t.Errorf("Sessions() = %d after Serve returned", got)
		}
		// Conn stays open and its read deadline is cleared: the caller
		// can still use it.
		send(t, c, "after")
		read := make(chan string, 1)
		go func() {
			buf := make([]byte, 16)
			n, _, err := conn.ReadFrom(buf)
			read <- fmt.Sprintf("%q, %v", buf[:n], err)
		}()
		select {
		case got := <-read:
			if want := `"after", <nil>`; got != want {
				t.Errorf("read after Serve: %s, want %s", got, want)
			}
		case <-time.After(waitFor):
			_ = conn.Close()
			t.Error("read after Serve hangs")
		}
	})
	t.Run("conn closed", func(t *testing.T) {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := newPicker()
		u := &UDPProxy{Conn: conn, Pick: p.Pick}
		served := make(chan error, 1)
		go func() { served <- u.Serve(context.Background()) }()
		c := udpClient(t, conn.LocalAddr().String())
		p.route(c, up.addr)
		exchange(t, c, "hi")
		check(t, conn.Close())
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if got := u.Sessions(); got != 0 {
			t.Errorf("Sessions() = %d after Serve returned", got)
		}
	})
	t.Run("missing fields", func(t *testing.T) {
		if err := (&UDPProxy{}).Serve(context.Background()); err == nil {
			t.Errorf("Serve without Conn and Pick = %v", err)
		}
	})
}
