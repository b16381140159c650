package bfd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// fakeClock is a Clock that moves only when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	at     time.Time
	active bool
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.ResetAt(c.Now().Add(d))
	return t
}

// Advance moves time forward and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.active && !t.at.After(c.now) {
			t.fireLocked()
		}
	}
}

func (t *fakeTimer) fireLocked() {
	t.active = false
	select {
	case t.ch <- t.c.now:
	default:
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	select {
	case <-t.ch:
	default:
	}
	return was
}

func (t *fakeTimer) ResetAt(at time.Time) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	select {
	case <-t.ch:
	default:
	}
	t.at, t.active = at, true
	if !t.at.After(t.c.now) {
		t.fireLocked()
	}
	return was
}

// testPeer is a BFD peer played by the test through a plain UDP socket on
// port 3784: it sees exactly what the speaker sends and sends exactly what
// the test wants, with the TTL the test wants.
type testPeer struct {
	t    *testing.T
	conn *net.UDPConn
	p    *ipv4.PacketConn
	to   netip.AddrPort
}

func newTestPeer(t *testing.T, ns *testNS, addr, speaker netip.Addr) *testPeer {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.do(t, func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, Port)))
		return err
	}); err != nil {
		t.Fatalf("test peer socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p := ipv4.NewPacketConn(conn)
	if err := p.SetControlMessage(ipv4.FlagTTL, true); err != nil {
		t.Fatalf("test peer: ask for ttl: %v", err)
	}
	return &testPeer{t: t, conn: conn, p: p, to: netip.AddrPortFrom(speaker, Port)}
}

// read returns the next packet from the speaker, its TTL and its source.
func (tp *testPeer) read() (ControlPacket, int, netip.AddrPort) {
	tp.t.Helper()
	buf := make([]byte, 128)
	if err := tp.conn.SetReadDeadline(time.Now().Add(hangGuard)); err != nil {
		tp.t.Fatal(err)
	}
	n, cm, src, err := tp.p.ReadFrom(buf)
	if err != nil {
		tp.t.Fatalf("test peer: no packet from the speaker: %v", err)
	}
	var pkt ControlPacket
	if err := pkt.UnmarshalBinary(buf[:n]); err != nil {
		tp.t.Fatalf("test peer: speaker sent a bad packet %x: %v", buf[:n], err)
	}
	ttl := -1
	if cm != nil {
		ttl = cm.TTL
	}
	return pkt, ttl, src.(*net.UDPAddr).AddrPort()
}

// send sends p with the given TTL.
func (tp *testPeer) send(p ControlPacket, ttl int) {
	tp.t.Helper()
	if err := tp.p.SetTTL(ttl); err != nil {
		tp.t.Fatalf("test peer: set ttl %d: %v", ttl, err)
	}
	b, err := p.MarshalBinary()
	if err != nil {
		tp.t.Fatalf("test peer: %v", err)
	}
	if _, err := tp.conn.WriteToUDPAddrPort(b, tp.to); err != nil {
		tp.t.Fatalf("test peer: send: %v", err)
	}
}

// waitReceived waits until the session accepted n packets in all, so that
// the test knows the speaker processed what it sent before moving time.
func waitReceived(t *testing.T, sp *Speaker, key SessionKey, n uint64) SessionState {
	t.Helper()
	var st SessionState
	eventually(t, fmt.Sprintf("session accepts %d packets", n), func() (bool, string) {
		st, _ = sp.Session(key)
		return st.Counters.PacketsReceived >= n, fmt.Sprintf("%d accepted", st.Counters.PacketsReceived)
	})
	return st
}

func waitStats(t *testing.T, sp *Speaker, what string, cond func(Stats) bool) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		st := sp.Stats()
		return cond(st), fmt.Sprintf("%+v", st)
	})
}

// TestSpeakerWithFakeClock drives one speaker through its life with the
// test playing the peer over real UDP on loopback and the clock stepped by
// hand: the wire format, TTL 255 both ways, the source port, the
// handshake, the exact detection instant, a remote AdminDown and removal.
func TestSpeakerWithFakeClock(t *testing.T) {
	ns := newTestNS(t)
	clock := newFakeClock(t0)
	local, peerAddr := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	sp := ns.startSpeaker(t, Options{Clock: clock, ListenAddrs: []netip.Addr{local}})
	events := watch(t, sp)
	peer := newTestPeer(t, ns, peerAddr, local)

	key := ns.addSession(t, sp, SessionConfig{Peer: peerAddr, Local: local, ControlPlaneIndependent: true})

	// The first packet leaves at once: Down, slow, with TTL 255 from a
	// port in 49152-65535.
	p, ttl, src := peer.read()
	if ttl != 255 {
		t.Errorf("speaker sent with ttl %d, want 255", ttl)
	}
	if src.Addr() != local || src.Port() < 49152 {
		t.Errorf("speaker sent from %v, want %v and a port in 49152-65535", src, local)
	}
	want := ControlPacket{State: StateDown, ControlPlaneIndependent: true, DetectMult: 3, MyDiscriminator: p.MyDiscriminator,
		DesiredMinTxInterval: time.Second, RequiredMinRxInterval: 300 * time.Millisecond}
	if p != want {
		t.Fatalf("first packet %+v, want %+v", p, want)
	}
	my := p.MyDiscriminator
	const theirs = 0xbfd0bfd0
	fromPeer := func(s State) ControlPacket {
		return ControlPacket{State: s, DetectMult: 3, MyDiscriminator: theirs, YourDiscriminator: my,
			DesiredMinTxInterval: 300 * time.Millisecond, RequiredMinRxInterval: 300 * time.Millisecond}
	}
	expectPacket := func(what string, check func(ControlPacket) bool) ControlPacket {
		t.Helper()
		p, _, psrc := peer.read()
		if psrc != src {
			t.Errorf("%s: sent from %v, want the session's %v throughout", what, psrc, src)
		}
		if !check(p) {
			t.Fatalf("%s: got %+v", what, p)
		}
		return p
	}

	// GTSM: a packet with TTL 64 is dropped before it reaches the session.
	peer.send(fromPeer(StateDown), 64)
	waitStats(t, sp, "ttl 64 dropped", func(s Stats) bool { return s.DroppedTTL == 1 })
	// A discriminator that is not ours is dropped too.
	wrong := fromPeer(StateDown)
	wrong.YourDiscriminator = my + 1
	peer.send(wrong, 255)
	waitStats(t, sp, "unknown discriminator dropped", func(s Stats) bool { return s.DroppedNoSession == 1 })
	if st, _ := sp.Session(key); st.State != StateDown || st.Counters.PacketsReceived != 0 {
		t.Fatalf("after the dropped packets: %v with %d accepted, want Down and none", st.State, st.Counters.PacketsReceived)
	}

	// Three-way handshake; each change is sent at once.
	down := fromPeer(StateDown)
	down.YourDiscriminator = 0
	peer.send(down, 255)
	if ev := events.next(key); ev.From != StateDown || ev.To != StateInit || !ev.At.Equal(t0) {
		t.Fatalf("event %+v, want Down -> Init at t0", ev)
	}
	expectPacket("Init", func(p ControlPacket) bool { return p.State == StateInit && p.YourDiscriminator == theirs })
	peer.send(fromPeer(StateUp), 255)
	if ev := events.next(key); ev.To != StateUp {
		t.Fatalf("event %+v, want Init -> Up", ev)
	}
	// Up, the session drops to 300ms and polls for it.
	expectPacket("Up with poll", func(p ControlPacket) bool {
		return p.State == StateUp && p.Poll && p.DesiredMinTxInterval == 300*time.Millisecond
	})
	final := fromPeer(StateUp)
	final.Final = true
	peer.send(final, 255)
	st := waitReceived(t, sp, key, 3)
	if st.Polling || st.TxInterval != 300*time.Millisecond || st.DetectionTime != 900*time.Millisecond ||
		st.RemoteDiscriminator != theirs || st.RemoteState != StateUp || !st.LastReceived.Equal(t0) {
		t.Fatalf("state after the Final: %+v", st)
	}

	// Detection: nothing more from the peer. One nanosecond short of 3 x
	// 300ms the session is still Up (the periodic packet proves the
	// speaker looked at that instant); at 900ms it goes Down, diag 1.
	clock.Advance(900*time.Millisecond - time.Nanosecond)
	expectPacket("periodic Up", func(p ControlPacket) bool { return p.State == StateUp })
	if st, _ := sp.Session(key); st.State != StateUp {
		t.Fatalf("state %v just before the detection time, want Up", st.State)
	}
	clock.Advance(time.Nanosecond)
	ev := events.next(key)
	if ev.From != StateUp || ev.To != StateDown || ev.Diag != DiagControlDetectionExpired || !ev.At.Equal(t0.Add(900*time.Millisecond)) {
		t.Fatalf("event %+v, want Up -> Down, diag 1, at t0+900ms", ev)
	}
	if !ev.PathFailed() {
		t.Errorf("detection timeout %+v: PathFailed false, want true", ev)
	}
	expectPacket("Down after timeout", func(p ControlPacket) bool {
		return p.State == StateDown && p.Diag == DiagControlDetectionExpired && p.YourDiscriminator == 0 &&
			p.DesiredMinTxInterval == time.Second
	})

	// Up again, then the peer goes AdminDown: Down with diag 3.
	peer.send(down, 255)
	events.until(key, StateInit)
	expectPacket("Init again", func(p ControlPacket) bool { return p.State == StateInit })
	peer.send(fromPeer(StateUp), 255)
	events.until(key, StateUp)
	expectPacket("Up again", func(p ControlPacket) bool { return p.State == StateUp })
	admin := fromPeer(StateAdminDown)
	admin.Diag = DiagAdminDown
	peer.send(admin, 255)
	ev = events.next(key)
	if ev.From != StateUp || ev.To != StateDown || ev.Diag != DiagNeighborDown || ev.RemoteDiag != DiagAdminDown {
		t.Fatalf("event %+v, want Up -> Down, diag 3, remote diag 7", ev)
	}
	if ev.PathFailed() {
		t.Errorf("peer's AdminDown %+v: PathFailed true, want false (RFC 5882 §3.2)", ev)
	}
	expectPacket("Down after AdminDown", func(p ControlPacket) bool { return p.State == StateDown && p.Diag == DiagNeighborDown })
	if st, _ := sp.Session(key); st.Counters.Ups != 2 || st.Counters.Downs != 2 {
		t.Errorf("counters %+v, want 2 ups and 2 downs", st.Counters)
	}

	// Removal: AdminDown with diag 7 at once, repeated for the peer's
	// detection time, then the session is gone for good.
	peer.send(down, 255)
	events.until(key, StateInit)
	expectPacket("Init before removal", func(p ControlPacket) bool { return p.State == StateInit })
	if err := sp.RemoveSession(key); err != nil {
		t.Fatalf("RemoveSession: %v", err)
	}
	if ev := events.next(key); ev.To != StateAdminDown || ev.Diag != DiagAdminDown {
		t.Fatalf("event %+v, want -> AdminDown, diag 7", ev)
	}
	expectPacket("AdminDown", func(p ControlPacket) bool { return p.State == StateAdminDown && p.Diag == DiagAdminDown })
	if _, ok := sp.Session(key); ok || len(sp.Sessions()) != 0 {
		t.Errorf("removed session still listed: %+v", sp.Sessions())
	}
	if err := sp.RemoveSession(key); !errors.Is(err, ErrNoSession) {
		t.Errorf("second RemoveSession: %v, want ErrNoSession", err)
	}
	clock.Advance(time.Second)
	expectPacket("AdminDown repeated", func(p ControlPacket) bool { return p.State == StateAdminDown })
	clock.Advance(3 * time.Second)
	// The loop sees the timer and the packet in either order, so the peer
	// keeps knocking until the discriminator is unknown.
	eventually(t, "drained session forgotten", func() (bool, string) {
		peer.send(fromPeer(StateDown), 255)
		s := sp.Stats()
		return s.DroppedNoSession >= 2, fmt.Sprintf("%+v", s)
	})
}

func TestSpeakerAPI(t *testing.T) {
	ns := newTestNS(t)
	local := netip.MustParseAddr("127.0.0.1")
	sp := ns.startSpeaker(t, Options{Clock: newFakeClock(t0), ListenAddrs: []netip.Addr{local}})
	cfg := SessionConfig{Peer: netip.MustParseAddr("127.0.0.3"), Local: local}

	ns.addSession(t, sp, cfg)
	err := ns.do(t, func() error { _, err := sp.AddSession(cfg); return err })
	if !errors.Is(err, ErrSessionExists) {
		t.Errorf("duplicate AddSession: %v, want ErrSessionExists", err)
	}
	other := cfg
	other.Local = netip.MustParseAddr("127.0.0.9")
	if err := ns.do(t, func() error { _, err := sp.AddSession(other); return err }); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("AddSession with a local address no listener covers: %v, want ErrInvalidConfig", err)
	}
	v6 := SessionConfig{Peer: netip.MustParseAddr("::2"), Local: netip.MustParseAddr("::3")}
	if err := ns.do(t, func() error { _, err := sp.AddSession(v6); return err }); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("IPv6 session on an IPv4-only speaker: %v, want ErrInvalidConfig", err)
	}
	echo := cfg
	echo.EchoMode = true
	if err := sp.UpdateSession(echo); !errors.Is(err, ErrEchoNotSupported) {
		t.Errorf("UpdateSession with echo: %v, want ErrEchoNotSupported", err)
	}
	missing := cfg
	missing.Peer = netip.MustParseAddr("127.0.0.4")
	if err := sp.UpdateSession(missing); !errors.Is(err, ErrNoSession) {
		t.Errorf("UpdateSession of an unknown session: %v, want ErrNoSession", err)
	}
	slower := cfg
	slower.RequiredMinRx = time.Second
	if err := sp.UpdateSession(slower); err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	if st := sp.Sessions(); len(st) != 1 || st[0].Config.RequiredMinRx != time.Second {
		t.Errorf("Sessions after update: %+v", st)
	}

	// A second speaker cannot take the port: one BFD speaker per namespace.
	err = ns.do(t, func() error {
		sp2, err := NewSpeaker(Options{ListenAddrs: []netip.Addr{local}})
		if err == nil {
			_ = sp2.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "taken by another BFD speaker") {
		t.Errorf("second speaker on the same address: %v, want an error saying port 3784 is taken", err)
	}

	events, _ := sp.Subscribe()
	if err := sp.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-events; ok {
		// Events from Close itself may or may not be delivered; the channel
		// must be closed in the end either way.
		for range events {
		}
	}
	if _, err := sp.AddSession(cfg); !errors.Is(err, ErrClosed) {
		t.Errorf("AddSession after Close: %v, want ErrClosed", err)
	}
}

// TestSpeakerGTSM checks RFC 5881 §5 on both families: a packet that
// crossed a router (TTL or hop limit below 255) is dropped before any
// session lookup, one with 255 gets through to it.
func TestSpeakerGTSM(t *testing.T) {
	ns := newTestNS(t)
	sp := ns.startSpeaker(t, Options{ListenAddrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}})
	pkt, err := (&ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 5}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		network string
		to      netip.Addr
	}{
		{"ipv4", "udp4", netip.MustParseAddr("127.0.0.1")},
		{"ipv6", "udp6", netip.IPv6Loopback()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conn *net.UDPConn
			if err := ns.do(t, func() error {
				var err error
				conn, err = net.ListenUDP(tc.network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(tc.to, 0)))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			setTTL := func(ttl int) error { return ipv4.NewConn(conn).SetTTL(ttl) }
			if tc.network == "udp6" {
				setTTL = func(ttl int) error { return ipv6.NewConn(conn).SetHopLimit(ttl) }
			}
			before := sp.Stats()
			for _, ttl := range []int{254, 1, 255} {
				if err := setTTL(ttl); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(tc.to, Port)); err != nil {
					t.Fatal(err)
				}
			}
			waitStats(t, sp, "three packets handled", func(s Stats) bool {
				return s.DroppedTTL+s.DroppedNoSession-before.DroppedTTL-before.DroppedNoSession == 3
			})
			if s := sp.Stats(); s.DroppedTTL-before.DroppedTTL != 2 || s.DroppedNoSession-before.DroppedNoSession != 1 {
				t.Errorf("stats %+v (before %+v): want ttl 254 and 1 dropped for ttl, 255 let through to session lookup", s, before)
			}
		})
	}
}
