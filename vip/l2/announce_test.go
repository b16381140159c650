package l2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The segment of the namespace tests: node (runs the Announcer), client
// (asks for the VIPs, connects to them) and listener (only watches).
var (
	nodeMAC     = mustMAC("02:00:5e:00:00:01")
	clientMAC   = mustMAC("02:00:5e:00:00:02")
	listenerMAC = mustMAC("02:00:5e:00:00:03")
	nodeIP4     = netip.MustParseAddr("192.0.2.1")
	clientIP4   = netip.MustParseAddr("192.0.2.2")
	// probeIP4 is the sender address of the test's own ARP requests, which
	// tells their replies from those to the client kernel's requests.
	probeIP4  = netip.MustParseAddr("192.0.2.50")
	clientIP6 = netip.MustParseAddr("fd00:db8:12::2")
	vip4      = netip.MustParseAddr("192.0.2.100")
	vip6      = netip.MustParseAddr("fd00:db8:12::100")
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

type testbed struct {
	node, client, listener *testNS
	clock                  *fakeClock
	an                     *Announcer
	// Captures: ARP and IPv6 on the client and on the listener.
	cARP, cIP6, lARP, lIP6 *capture
}

func newTestbed(t *testing.T, opts Options) *testbed {
	t.Helper()
	requireRoot(t)
	seg := newSegment(t)
	tb := &testbed{
		node:     newTestNS(t, "node"),
		client:   newTestNS(t, "client"),
		listener: newTestNS(t, "listener"),
		clock:    newFakeClock(),
	}
	seg.attach(t, tb.node, "p-node", nodeMAC.String(), "192.0.2.1/24", "fd00:db8:12::1/64")
	seg.attach(t, tb.client, "p-client", clientMAC.String(), "192.0.2.2/24", "fd00:db8:12::2/64")
	seg.attach(t, tb.listener, "p-listener", listenerMAC.String(), "192.0.2.3/24", "fd00:db8:12::3/64")
	tb.cARP = newCapture(t, tb.client, etherTypeARP)
	tb.cIP6 = newCapture(t, tb.client, etherTypeIP6)
	tb.lARP = newCapture(t, tb.listener, etherTypeARP)
	tb.lIP6 = newCapture(t, tb.listener, etherTypeIP6)
	opts.Clock = tb.clock
	opts.Logger = testLogger(t)
	an, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tb.an = an
	t.Cleanup(func() {
		if err := tb.node.do(t, an.Close); err != nil {
			t.Errorf("close announcer: %v", err)
		}
	})
	return tb
}

func (tb *testbed) announce(t *testing.T, addr netip.Addr) {
	t.Helper()
	if err := tb.node.do(t, func() error { return tb.an.Announce("eth0", addr) }); err != nil {
		t.Fatalf("Announce: %v", err)
	}
}

func (tb *testbed) release(t *testing.T, addr netip.Addr) {
	t.Helper()
	if err := tb.node.do(t, func() error { return tb.an.Release("eth0", addr) }); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// decoded is a frame decoded by gopacket, a codec independent of the one
// under test.
func decode(f []byte) gopacket.Packet {
	return gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
}

func arpOf(f []byte) (*layers.Ethernet, *layers.ARP) {
	p := decode(f)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	a, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	return eth, a
}

// naOf returns the neighbour advertisement in f with its IPv6 header,
// checking the ICMPv6 checksum.
func naOf(t *testing.T, f []byte) (*layers.Ethernet, *layers.IPv6, *layers.ICMPv6NeighborAdvertisement) {
	p := decode(f)
	na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if na == nil {
		return nil, nil, nil
	}
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatalf("checksum of advertisement: %v", err)
	}
	if err, res := icmp.VerifyChecksum(); err != nil || !res.Valid {
		t.Errorf("advertisement with a bad checksum: %v %+v", err, res)
	}
	return p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet), ip, na
}

func tlla(na *layers.ICMPv6NeighborAdvertisement) net.HardwareAddr {
	for _, o := range na.Options {
		if o.Type == layers.ICMPv6OptTargetAddress {
			return o.Data
		}
	}
	return nil
}

// isGARP matches a gratuitous ARP request for vip.
func isGARP(vip netip.Addr) func([]byte) bool {
	return func(f []byte) bool {
		_, a := arpOf(f)
		return a != nil && a.Operation == layers.ARPRequest && bytes.Equal(a.SourceProtAddress, vip.AsSlice()) && bytes.Equal(a.DstProtAddress, vip.AsSlice())
	}
}

// isNAFor matches any neighbour advertisement for target.
func isNAFor(t *testing.T, target netip.Addr) func([]byte) bool {
	return func(f []byte) bool {
		_, _, na := naOf(t, f)
		return na != nil && na.TargetAddress.Equal(target.AsSlice())
	}
}

// arpRequestFrame builds a request from the client for target.
func arpRequestFrame(ethDst net.HardwareAddr, sender netip.Addr, target netip.Addr) []byte {
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: ethDst, EthernetType: layers.EthernetTypeARP}
	a := &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: clientMAC, SourceProtAddress: sender.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice(),
	}
	return serialize(eth, a)
}

// neighbourSolicitation builds a solicitation from the client for target,
// with a Source Link-Layer Address option when sll is set.
func neighbourSolicitation(ethDst net.HardwareAddr, src, dst, target netip.Addr, sll bool) []byte {
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: ethDst, EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	_ = icmp.SetNetworkLayerForChecksum(ip)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if sll {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: clientMAC}}
	}
	return serialize(eth, ip, icmp, ns)
}

func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

func mcastMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// arpAnswers sends a request for target and, after the first reply for it,
// a request for the node's own address, which the kernel answers: the
// replies for target seen before that barrier reply are returned. The
// kernel would have answered target at once, before the responder's reply,
// so a kernel answer lands before the barrier.
func (tb *testbed) arpAnswers(t *testing.T, ethDst net.HardwareAddr, target netip.Addr, expectOne bool) []*layers.ARP {
	t.Helper()
	isReply := func(from netip.Addr) func([]byte) bool {
		return func(f []byte) bool {
			_, a := arpOf(f)
			return a != nil && a.Operation == layers.ARPReply && bytes.Equal(a.SourceProtAddress, from.AsSlice()) &&
				bytes.Equal(a.DstProtAddress, probeIP4.AsSlice())
		}
	}
	var got []*layers.ARP
	tb.cARP.send(arpRequestFrame(ethDst, probeIP4, target), ethDst)
	if expectOne {
		_, a := arpOf(tb.cARP.next("arp reply for "+target.String(), isReply(target)))
		got = append(got, a)
	}
	tb.cARP.send(arpRequestFrame(broadcast(), probeIP4, nodeIP4), broadcast())
	for {
		f := tb.cARP.next("arp reply", func(f []byte) bool { return isReply(target)(f) || isReply(nodeIP4)(f) })
		_, a := arpOf(f)
		if bytes.Equal(a.SourceProtAddress, nodeIP4.AsSlice()) {
			return got
		}
		got = append(got, a)
	}
}

func broadcast() net.HardwareAddr { return net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }

func TestAnnounceOnSegment(t *testing.T) {
	tb := newTestbed(t, Options{Repeat: 3, Interval: time.Second})
	tb.an.Renew(tb.clock.Now().Add(10 * time.Second))
	tb.announce(t, vip4)
	tb.announce(t, vip6)

	t.Run("gratuitous ARP and unsolicited NA at takeover, repeated on the clock", func(t *testing.T) {
		for round := 1; round <= 3; round++ {
			eth, a := arpOf(tb.lARP.next("gratuitous arp", isGARP(vip4)))
			if !bytes.Equal(eth.DstMAC, broadcast()) || !bytes.Equal(a.SourceHwAddress, nodeMAC) || !bytes.Equal(a.DstHwAddress, make([]byte, 6)) {
				t.Errorf("round %d: gratuitous arp eth dst %v sender %v target mac %v, want broadcast, %v, zero", round, eth.DstMAC, net.HardwareAddr(a.SourceHwAddress), net.HardwareAddr(a.DstHwAddress), nodeMAC)
			}
			eth6, ip, na := naOf(t, tb.lIP6.next("unsolicited advertisement", isNAFor(t, vip6)))
			if !bytes.Equal(eth6.DstMAC, mcastMAC(netip.MustParseAddr("ff02::1"))) || !ip.DstIP.Equal(net.ParseIP("ff02::1")) || ip.HopLimit != 255 {
				t.Errorf("round %d: advertisement to %v/%v hop limit %d, want all-nodes, 255", round, eth6.DstMAC, ip.DstIP, ip.HopLimit)
			}
			if !na.Override() || na.Solicited() || na.Router() || !bytes.Equal(tlla(na), nodeMAC) {
				t.Errorf("round %d: advertisement O=%v S=%v R=%v tlla %v, want O, not S, not R, %v", round, na.Override(), na.Solicited(), na.Router(), tlla(na), nodeMAC)
			}
			// Each round's timer exists before the round goes out, so the
			// step reaches it.
			tb.clock.Advance(time.Second)
		}
		eventually(t, "counters of three rounds", func() bool {
			c := tb.an.Counters()
			return c.GARPs == 3 && c.UnsolicitedNAs == 3
		})
	})

	t.Run("vip bound on lo, kernel kept off ARP, solicited-node group joined", func(t *testing.T) {
		lo := tb.node.ip(t, "addr", "show", "dev", "lo")
		for _, want := range []string{"192.0.2.100/32", "fd00:db8:12::100/128"} {
			if !strings.Contains(lo, want) {
				t.Errorf("lo lacks %s:\n%s", want, lo)
			}
		}
		if !strings.Contains(lo, "deprecated") || !strings.Contains(lo, "nodad") || !strings.Contains(lo, "noprefixroute") {
			t.Errorf("the IPv6 vip on lo is not deprecated, nodad and noprefixroute:\n%s", lo)
		}
		// No main-table route through lo: the main table must still lead
		// to the VIP's segment (a restarted agent picks the interface by
		// it). The local table's route makes the kernel accept the VIP.
		if main := tb.node.ip(t, "-6", "route", "show", "table", "main", "fd00:db8:12::100"); main != "" {
			t.Errorf("main-table route for the vip bound on lo: %q, want none", main)
		}
		if local := tb.node.ip(t, "-6", "route", "show", "table", "local", "fd00:db8:12::100"); !strings.Contains(local, "local fd00:db8:12::100 dev lo") {
			t.Errorf("local-table route for the vip: %q, want local … dev lo", local)
		}
		if got := tb.node.cat(t, "/proc/sys/net/ipv4/conf/eth0/arp_ignore"); got != "1" {
			t.Errorf("arp_ignore on eth0 = %s, want 1", got)
		}
		if got := tb.node.cat(t, "/proc/sys/net/ipv4/conf/eth0/arp_announce"); got != "2" {
			t.Errorf("arp_announce on eth0 = %s, want 2", got)
		}
		if m := tb.node.ip(t, "-6", "maddr", "show", "dev", "eth0"); !strings.Contains(m, "ff02::1:ff00:100") {
			t.Errorf("eth0 has not joined ff02::1:ff00:100:\n%s", m)
		}
		want := []Announcement{{"eth0", vip4}, {"eth0", vip6}}
		if got := tb.an.Active(); !equalAnnouncements(got, want) {
			t.Errorf("Active() = %v, want %v", got, want)
		}
	})

	t.Run("ARP requests get exactly one answer with the node's MAC", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			ethDst net.HardwareAddr
		}{
			{"broadcast", broadcast()},
			{"unicast probe", nodeMAC},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := tb.arpAnswers(t, tc.ethDst, vip4, true)
				if len(got) != 1 {
					t.Fatalf("%d replies for %s, want exactly 1", len(got), vip4)
				}
				if a := got[0]; !bytes.Equal(a.SourceHwAddress, nodeMAC) || !bytes.Equal(a.DstHwAddress, clientMAC) || !bytes.Equal(a.DstProtAddress, probeIP4.AsSlice()) {
					t.Errorf("reply %v is-at %v to %v/%v, want %v to %v/%v", vip4, net.HardwareAddr(a.SourceHwAddress), net.HardwareAddr(a.DstHwAddress), net.IP(a.DstProtAddress), nodeMAC, clientMAC, probeIP4)
				}
			})
		}
	})

	t.Run("neighbour solicitations answered", func(t *testing.T) {
		for _, tc := range []struct {
			name          string
			ethDst        net.HardwareAddr
			src, dst      netip.Addr
			sll           bool
			wantEth       net.HardwareAddr
			wantDst       netip.Addr
			wantSolicited bool
		}{
			{"multicast", mcastMAC(solicitedNode(vip6)), clientIP6, solicitedNode(vip6), true, clientMAC, clientIP6, true},
			{"unicast NUD probe", nodeMAC, clientIP6, vip6, false, clientMAC, clientIP6, true},
			{"duplicate address probe", mcastMAC(solicitedNode(vip6)), netip.IPv6Unspecified(), solicitedNode(vip6), false,
				mcastMAC(netip.MustParseAddr("ff02::1")), netip.MustParseAddr("ff02::1"), false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := tb.an.Counters().SolicitedNAs
				tb.cIP6.send(neighbourSolicitation(tc.ethDst, tc.src, tc.dst, vip6, tc.sll), tc.ethDst)
				eth, ip, na := naOf(t, tb.cIP6.next("advertisement for "+vip6.String(), func(f []byte) bool {
					_, ip, na := naOf(t, f)
					// Unsolicited rounds are sent to all-nodes without S;
					// wait for the answer of this case.
					return na != nil && na.TargetAddress.Equal(vip6.AsSlice()) && ip.DstIP.Equal(tc.wantDst.AsSlice()) && na.Solicited() == tc.wantSolicited
				}))
				if !bytes.Equal(eth.DstMAC, tc.wantEth) || !bytes.Equal(eth.SrcMAC, nodeMAC) || !ip.SrcIP.Equal(vip6.AsSlice()) || ip.HopLimit != 255 {
					t.Errorf("advertisement %v→%v from %v hop limit %d, want %v→%v from %v, 255", eth.SrcMAC, eth.DstMAC, ip.SrcIP, ip.HopLimit, nodeMAC, tc.wantEth, vip6)
				}
				if !na.Override() || !bytes.Equal(tlla(na), nodeMAC) {
					t.Errorf("advertisement O=%v tlla %v, want O and %v", na.Override(), tlla(na), nodeMAC)
				}
				eventually(t, "solicited advertisement counted", func() bool { return tb.an.Counters().SolicitedNAs == before+1 })
			})
		}
	})

	t.Run("client reaches the vip over TCP", func(t *testing.T) {
		for _, vip := range []netip.Addr{vip4, vip6} {
			t.Run(vip.String(), func(t *testing.T) { tcpRoundTrip(t, tb, vip) })
		}
	})

	t.Run("no answer after the lease expires", func(t *testing.T) {
		tb.clock.Advance(time.Hour)
		before := tb.an.Counters().Suppressed
		tb.cARP.send(arpRequestFrame(broadcast(), clientIP4, vip4), broadcast())
		eventually(t, "arp request suppressed", func() bool { return tb.an.Counters().Suppressed > before })
		if got := tb.arpAnswers(t, broadcast(), vip4, false); len(got) != 0 {
			t.Errorf("%d replies for %s after the lease expired, want none (kernel or agent)", len(got), vip4)
		}
		before = tb.an.Counters().Suppressed
		tb.cIP6.send(neighbourSolicitation(nodeMAC, clientIP6, vip6, vip6, false), nodeMAC)
		eventually(t, "solicitation suppressed", func() bool { return tb.an.Counters().Suppressed > before })
		err := tb.node.do(t, func() error { return tb.an.Announce("eth0", netip.MustParseAddr("192.0.2.101")) })
		if !errors.Is(err, ErrLeaseExpired) {
			t.Errorf("Announce with an expired lease: %v, want ErrLeaseExpired", err)
		}
		// Renewing brings the answers back: the lease alone stopped them.
		tb.an.Renew(tb.clock.Now().Add(10 * time.Second))
		if got := tb.arpAnswers(t, broadcast(), vip4, true); len(got) != 1 {
			t.Errorf("%d replies for %s after renewal, want 1", len(got), vip4)
		}
	})

	t.Run("release removes the vip and stops answering", func(t *testing.T) {
		tb.release(t, vip4)
		tb.release(t, vip6)
		if got := tb.an.Active(); len(got) != 0 {
			t.Errorf("Active() after release = %v, want none", got)
		}
		lo := tb.node.ip(t, "addr", "show", "dev", "lo")
		if strings.Contains(lo, "192.0.2.100") || strings.Contains(lo, "fd00:db8:12::100") {
			t.Errorf("vip still on lo after release:\n%s", lo)
		}
		if m := tb.node.ip(t, "-6", "maddr", "show", "dev", "eth0"); strings.Contains(m, "ff02::1:ff00:100") {
			t.Errorf("eth0 still in ff02::1:ff00:100 after release:\n%s", m)
		}
		if got := tb.arpAnswers(t, broadcast(), vip4, false); len(got) != 0 {
			t.Errorf("%d replies for %s after release, want none", len(got), vip4)
		}
		err := tb.node.do(t, func() error { return tb.an.Release("eth0", vip4) })
		if !errors.Is(err, ErrNotAnnounced) || !strings.Contains(err.Error(), "192.0.2.100 on eth0") {
			t.Errorf("second Release: %v, want ErrNotAnnounced naming the vip and interface", err)
		}
	})
}

func equalAnnouncements(a, b []Announcement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// tcpRoundTrip listens on vip:7000 in the node namespace and exchanges a
// line with a client in the client namespace.
func tcpRoundTrip(t *testing.T, tb *testbed, vip netip.Addr) {
	t.Helper()
	addr := netip.AddrPortFrom(vip, 7000).String()
	var ln net.Listener
	if err := tb.node.do(t, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in the node: %v", addr, err)
	}
	defer func() { _ = ln.Close() }()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer func() { _ = c.Close() }()
		_, err = io.Copy(c, io.LimitReader(c, 5))
		served <- err
	}()
	var conn net.Conn
	if err := tb.client.do(t, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, hangGuard)
		return err
	}); err != nil {
		t.Fatalf("dial %s from the client: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(hangGuard))
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatalf("write to %s: %v", addr, err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hello" {
		t.Fatalf("echo from %s = %q, %v; want hello", addr, got, err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve %s: %v", addr, err)
	}
}
