package decap

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
)

// testbed is a sender namespace, standing for both the load balancer and
// the client, and a backend namespace holding the VIP on its loopback,
// joined by a veth pair.
type testbed struct {
	sender, backend     netns.NsHandle
	senderNS, backendNS string
	senderIf, backendIf string
}

// testbedSeq keeps namespace and link names unique within the process.
var testbedSeq atomic.Int32

// newTestbed creates the namespaces and links, removed by name at the end
// of the test. Addresses: the sender has lb4/lb6 on its veth and the
// client's addresses on its loopback; the backend has backend4/backend6 on
// its veth, the VIPs on its loopback and routes back to the client through
// the sender.
func newTestbed(t *testing.T) *testbed {
	t.Helper()
	id := fmt.Sprintf("%d%c", os.Getpid()%100000, 'a'+testbedSeq.Add(1)%26)
	tb := &testbed{
		senderNS:  "decapt-" + id + "-snd",
		backendNS: "decapt-" + id + "-be",
		senderIf:  "dcs" + id,
		backendIf: "dcb" + id,
	}
	for _, ns := range []string{tb.senderNS, tb.backendNS} {
		ip(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
	}
	for _, ns := range []string{tb.senderNS, tb.backendNS} {
		// Without duplicate address detection the link-local addresses,
		// which neighbour discovery sends from, are usable at once.
		ip(t, "netns", "exec", ns, "sysctl", "-qw",
			"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	// Created inside the namespaces, so removing them removes the pair.
	ip(t, "link", "add", tb.senderIf, "netns", tb.senderNS, "type", "veth",
		"peer", "name", tb.backendIf, "netns", tb.backendNS)

	s, b := tb.senderNS, tb.backendNS
	for _, args := range [][]string{
		{"-n", s, "link", "set", "lo", "up"},
		{"-n", s, "link", "set", tb.senderIf, "up"},
		{"-n", s, "addr", "add", lb4.String() + "/24", "dev", tb.senderIf},
		{"-n", s, "addr", "add", lb6.String() + "/64", "dev", tb.senderIf, "nodad"},
		{"-n", s, "addr", "add", client4.String() + "/32", "dev", "lo"},
		{"-n", s, "addr", "add", client6.String() + "/128", "dev", "lo", "nodad"},
		{"-n", b, "link", "set", "lo", "up"},
		{"-n", b, "link", "set", tb.backendIf, "up"},
		{"-n", b, "addr", "add", backend4.String() + "/24", "dev", tb.backendIf},
		{"-n", b, "addr", "add", backend6.String() + "/64", "dev", tb.backendIf, "nodad"},
		{"-n", b, "addr", "add", vip4.String() + "/32", "dev", "lo"},
		{"-n", b, "addr", "add", vip6.String() + "/128", "dev", "lo", "nodad"},
		{"-n", b, "route", "add", client4.String() + "/32", "via", lb4.String()},
		{"-n", b, "-6", "route", "add", client6.String() + "/128", "via", lb6.String()},
	} {
		ip(t, args...)
	}
	for ns, ifname := range map[string]string{s: tb.senderIf, b: tb.backendIf} {
		// The reply comes from the VIP, which the sender has no route to,
		// and the inner packet from the client, which the backend reaches
		// by its veth only through the route above: no source checks. The
		// kernel applies the stricter of "all" and the interface's.
		ip(t, "netns", "exec", ns, "sysctl", "-qw",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
			"net.ipv4.conf.lo.rp_filter=0", "net.ipv4.conf."+ifname+".rp_filter=0")
	}
	// The veth would otherwise hand the outer UDP packets on with a
	// partial checksum, whose offsets the decapsulation invalidates.
	ip(t, "netns", "exec", s, "ethtool", "-K", tb.senderIf, "tx", "off")

	var err error
	if tb.sender, err = netns.GetFromName(s); err != nil {
		t.Fatalf("open namespace %s: %v", s, err)
	}
	t.Cleanup(func() { _ = tb.sender.Close() })
	if tb.backend, err = netns.GetFromName(b); err != nil {
		t.Fatalf("open namespace %s: %v", b, err)
	}
	t.Cleanup(func() { _ = tb.backend.Close() })
	return tb
}

// ip runs ip(8) with args and fails the test if it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNS runs fn on a thread switched into ns. Sockets and links fn creates
// stay in ns; goroutines it starts do not run there.
func inNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current namespace: %w", err)
	}
	defer func() { _ = orig.Close() }()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace: %w", err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked, so it ends with this goroutine rather
		// than run others in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("leave namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// echoServer answers every datagram on the VIP's port with "echo " and the
// datagram, to its source: the client, straight, not through the sender's
// load-balancer role.
func echoServer(t *testing.T, tb *testbed, vip netip.Addr) {
	t.Helper()
	var conn net.PacketConn
	err := inNS(tb.backend, func() error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, serverPort)))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %v: %v", vip, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = conn.Close()
		wg.Wait()
	})
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if _, err := conn.WriteTo(append([]byte("echo "), buf[:n]...), from); err != nil {
				t.Errorf("echo to %v: %v", from, err)
				return
			}
		}
	})
}

// listen returns a socket of network in ns bound to addr, closed at the end
// of the test: raw IP ("ip4:4") or UDP.
func listen(t *testing.T, ns netns.NsHandle, network, addr string) net.PacketConn {
	t.Helper()
	var conn net.PacketConn
	err := inNS(ns, func() error {
		var err error
		conn, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// e2eCase sends the client's datagram to the VIP, encapsulated by the
// sender's own stack: a raw IP socket of the outer protocol writes the outer
// IP header (IPIP, ip6ip6 and the mixed forms), a UDP socket to the GUE
// port writes the outer IP and UDP headers (GUE).
type e2eCase struct {
	name    string
	network string     // of the sending socket
	local   netip.Addr // sending socket's address, the outer source
	remote  net.Addr   // the outer destination
	vip     netip.Addr
	counter field
}

func e2eCases() []e2eCase {
	gue4 := net.UDPAddrFromAddrPort(netip.AddrPortFrom(backend4, DefaultGUEPort))
	gue6 := net.UDPAddrFromAddrPort(netip.AddrPortFrom(backend6, DefaultGUEPort))
	raw4 := &net.IPAddr{IP: backend4.AsSlice()}
	raw6 := &net.IPAddr{IP: backend6.AsSlice()}
	return []e2eCase{
		{"ipip", "ip4:4", lb4, raw4, vip4, cntIP4InIP4},
		{"ipv6 in ipv4", "ip4:41", lb4, raw4, vip6, cntIP6InIP4},
		{"ip6ip6", "ip6:41", lb6, raw6, vip6, cntIP6InIP6},
		{"ipv4 in ipv6", "ip6:4", lb6, raw6, vip4, cntIP4InIP6},
		{"gue ipv4 in ipv4", "udp4", lb4, gue4, vip4, cntGUEIP4},
		{"gue ipv6 in ipv4", "udp4", lb4, gue4, vip6, cntGUEIP4},
		{"gue ipv4 in ipv6", "udp6", lb6, gue6, vip4, cntGUEIP6},
		{"gue ipv6 in ipv6", "udp6", lb6, gue6, vip6, cntGUEIP6},
	}
}

// TestEndToEnd attaches the program to the backend's veth in each mode and
// has the backend's UDP server, listening on the VIP, answer encapsulated
// datagrams straight to the client. The backend kernel has no tunnel
// drivers: without the program, none of these would reach the server.
func TestEndToEnd(t *testing.T) {
	for _, m := range []struct {
		mode, want Mode
		attached   uint8 // IFLA_XDP_ATTACHED
	}{
		{ModeAuto, ModeNative, nl.XDP_ATTACHED_DRV},
		{ModeNative, ModeNative, nl.XDP_ATTACHED_DRV},
		{ModeGeneric, ModeGeneric, nl.XDP_ATTACHED_SKB},
	} {
		t.Run(m.mode.String(), func(t *testing.T) {
			tb := newTestbed(t)
			d := newDecap(t, Options{LocalAddrs: []netip.Addr{backend4, backend6}})
			var got Mode
			err := inNS(tb.backend, func() error {
				var err error
				got, err = d.Attach(tb.backendIf, m.mode)
				return err
			})
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if got != m.want {
				t.Errorf("Attach(%v) = %v, want %v", m.mode, got, m.want)
			}
			checkXDP(t, tb, m.attached)

			echoServer(t, tb, vip4)
			echoServer(t, tb, vip6)
			clients := map[bool]net.PacketConn{
				true:  listen(t, tb.sender, "udp4", netip.AddrPortFrom(client4, clientPort).String()),
				false: listen(t, tb.sender, "udp6", netip.AddrPortFrom(client6, clientPort).String()),
			}
			for _, tc := range e2eCases() {
				t.Run(tc.name, func(t *testing.T) {
					sendReceive(t, d, tb, tc, clients[tc.vip.Is4()])
				})
			}

			err = inNS(tb.backend, func() error {
				_, err := d.Attach(tb.backendIf, m.mode)
				return err
			})
			if !errors.Is(err, ErrAttached) {
				t.Errorf("second Attach: %v, want ErrAttached", err)
			}
			if err := d.Detach(tb.backendIf); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			checkXDP(t, tb, nl.XDP_ATTACHED_NONE)
			if err := d.Detach(tb.backendIf); !errors.Is(err, ErrNotAttached) {
				t.Errorf("second Detach: %v, want ErrNotAttached", err)
			}
		})
	}
}

// sendReceive sends one encapsulated datagram from the client to the VIP
// and checks the server's answer reaches the client, from the VIP, and that
// the program counted one decapsulation of the case's kind.
func sendReceive(t *testing.T, d *Decap, tb *testbed, tc e2eCase, client net.PacketConn) {
	t.Helper()
	before, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	payload := "hello over " + tc.name
	inner := innerPacket(t, tc.vip, payload)
	local := tc.local.String()
	if strings.HasPrefix(tc.network, "udp") {
		local = netip.AddrPortFrom(tc.local, 0).String()
	}
	out := listen(t, tb.sender, tc.network, local)
	if _, err := out.WriteTo(inner, tc.remote); err != nil {
		t.Fatalf("send: %v", err)
	}

	// A bound on a wait that succeeds at once when the program works,
	// not a measure of it.
	if err := client.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, from, err := client.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no answer from the server: %v", err)
	}
	if want := "echo " + payload; !bytes.Equal(buf[:n], []byte(want)) {
		t.Errorf("answer %q, want %q", buf[:n], want)
	}
	if got := from.(*net.UDPAddr).AddrPort(); got != netip.AddrPortFrom(tc.vip, serverPort) {
		t.Errorf("answer from %v, want the VIP %v", got, netip.AddrPortFrom(tc.vip, serverPort))
	}

	after, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	dc := delta(before, after)
	if got := *tc.counter(&dc); got != 1 {
		t.Errorf("decapsulations of this kind counted: %d, want 1 (all moves: %+v)", got, dc)
	}
	if dc.Malformed != 0 || dc.NotLocal != 0 {
		t.Errorf("malformed or not-local packets counted: %+v", dc)
	}
}

// checkXDP checks through netlink how an XDP program is attached to the
// backend's veth.
func checkXDP(t *testing.T, tb *testbed, want uint8) {
	t.Helper()
	h, err := netlink.NewHandleAt(tb.backend)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(tb.backendIf)
	if err != nil {
		t.Fatal(err)
	}
	var got uint32
	if x := l.Attrs().Xdp; x != nil {
		got = x.AttachMode
	}
	if got != uint32(want) {
		t.Errorf("XDP attach mode of %s = %d, want %d", tb.backendIf, got, want)
	}
}
