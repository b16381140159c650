package fastpath

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// Backends and clients the tables below use.
var (
	be4a = netip.AddrPortFrom(onLink4(11), 8080)
	be4b = netip.AddrPortFrom(onLink4(12), 8080)
	be6a = netip.AddrPortFrom(onLink6(11), 8080)
	be6b = netip.AddrPortFrom(onLink6(12), 8080)

	notVIP4 = netip.MustParseAddr("192.0.2.99")
	router4 = netip.MustParseAddr("192.0.2.1")
	router6 = netip.MustParseAddr("2001:db8:9::1")
)

type counts = map[fpbpf.FastpathFpCounter]uint64

// TestProgVerdicts runs one frame per case through a freshly loaded
// program and checks the verdict, every counter that moved (and that no
// other did) and, for forwarded frames, the MAC addresses bpf_fib_lookup
// filled in from the test namespace's neighbour table.
func TestProgVerdicts(t *testing.T) {
	n := newProgNet(t)
	natVIP := progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}
	dsrVIP := progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP}
	dsrVIP6 := progVIP{addr: progVIP6, port: 53, proto: ipUDP, id: 2, forward: fwdDSRGUE}
	fromClient := tcpTo(progClient4, progVIP4, 34567, 80)
	fromClient6 := udpTo(progClient6, progVIP6, 34567, 53)
	// The VIP's reply to the client that a router on the way answered
	// with "fragmentation needed" / "packet too big".
	vipReply := tcpTo(progVIP4, progClient4, 80, 34567)
	vipReply6 := udpTo(progVIP6, progClient6, 53, 34567)
	// Client packets of n bytes of payload (a pattern, so that a quote
	// from the wrong offset shows), with DF for IPv4.
	bigFrom := func(p progPkt, n int) progPkt {
		p.df = p.src.Is4()
		p.payload = make([]byte, n)
		for i := range p.payload {
			p.payload[i] = byte(i % 251)
		}
		return p
	}
	dsrTCP6 := progVIP{addr: progVIP6, port: 80, proto: ipTCP, id: 3, forward: fwdDSRIPIP}
	fromClient6TCP := tcpTo(progClient6, progVIP6, 34567, 80)
	tooBigSent := counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cICMPTooBigSent: 1}

	for _, tc := range []struct {
		name     string
		setup    func(e *progEnv)
		pkt      progPkt
		raw      func(t testing.TB) []byte // instead of pkt
		want     progVerdict
		counters counts
		macs     [2]net.HardwareAddr // destination and source MAC of a forwarded frame
		// check, if set, checks the output frame against the input.
		check func(t *testing.T, in, out []byte)
	}{
		{
			name: "ARP is passed", raw: progARPFrame,
			want: xdpPass, counters: counts{cRX: 1, cPassNotIP: 1},
		},
		{
			name: "IPv4 first fragment (MF) to a VIP is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  func() progPkt { p := fromClient; p.mf = true; return p }(),
			want: xdpPass, counters: counts{cRX: 1, cPassFragment: 1},
		},
		{
			name: "IPv4 later fragment (offset) to a VIP is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  func() progPkt { p := fromClient; p.fragOff = 185; return p }(),
			want: xdpPass, counters: counts{cRX: 1, cPassFragment: 1},
		},
		{
			name: "IPv6 with a fragment header to a VIP is passed", setup: func(e *progEnv) { e.addFastVIP(dsrVIP6, be6a) },
			pkt:  func() progPkt { p := fromClient6; p.v6Frag = true; return p }(),
			want: xdpPass, counters: counts{cRX: 1, cPassFragment: 1},
		},
		{
			name: "GRE to a VIP address is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a); e.addAddrEntry(progVIP4, vipFlagEcho) },
			pkt:  progPkt{src: progClient4, dst: progVIP4, proto: 47, payload: []byte{0, 0, 8, 0, 1, 2, 3, 4}},
			want: xdpPass, counters: counts{cRX: 1, cPassOtherProto: 1},
		},
		{
			name: "SCTP over IPv6 to a VIP address is passed", setup: func(e *progEnv) { e.addFastVIP(dsrVIP6, be6a) },
			pkt:  progPkt{src: progClient6, dst: progVIP6, proto: 132, payload: []byte{0x13, 0x88, 0, 53, 0, 0, 0, 0, 0, 0, 0, 0}},
			want: xdpPass, counters: counts{cRX: 1, cPassOtherProto: 1},
		},
		{
			name: "TCP to an address that is no VIP is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  tcpTo(progClient4, notVIP4, 34567, 80),
			want: xdpPass, counters: counts{cRX: 1, cPassNotVIP: 1},
		},
		{
			name: "TCP to another port of a VIP address is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  tcpTo(progClient4, progVIP4, 34567, 81),
			want: xdpPass, counters: counts{cRX: 1, cPassNotVIP: 1},
		},
		{
			name: "VIP entry marked PASS goes to the slow path",
			setup: func(e *progEnv) {
				e.addVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdPass})
			},
			pkt:  fromClient,
			want: xdpPass, counters: counts{cRX: 1, cPassSlowPath: 1},
		},
		{
			name: "fast VIP without a Maglev table is dropped", setup: func(e *progEnv) { e.addVIP(natVIP) },
			pkt:  fromClient,
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cDropNoBackend: 1},
		},
		{
			name: "fast VIP whose Maglev slot is empty is dropped", setup: func(e *progEnv) { e.addVIP(natVIP); e.fillTable(natVIP.id) },
			pkt:  fromClient,
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cDropNoBackend: 1},
		},
		{
			name: "fast VIP whose slot names an inactive backend is dropped",
			setup: func(e *progEnv) {
				e.addFastVIP(natVIP, be4a)
				e.putBackend(natVIP.id*16+1, be4a, 0)
			},
			pkt:  fromClient,
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cDropNoBackend: 1},
		},
		{
			name: "NAT is sent back out of the interface", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  fromClient,
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cNATCreated: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "NAT keeping the client is sent back out",
			setup: func(e *progEnv) {
				v := natVIP
				v.forward = fwdNATKeepClient
				e.addFastVIP(v, be4a)
			},
			pkt:  fromClient,
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cNATCreated: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "DSR IPIP is sent back out", setup: func(e *progEnv) { e.addFastVIP(dsrVIP, be4a) },
			pkt:  fromClient,
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "DSR GUE over IPv6 is sent back out", setup: func(e *progEnv) { e.addFastVIP(dsrVIP6, be6a) },
			pkt:  fromClient6,
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be6a.Addr()), macIn},
		},
		{
			name: "DSR L2 is sent back out",
			setup: func(e *progEnv) {
				v := dsrVIP
				v.forward = fwdDSRL2
				e.addFastVIP(v, be4b)
			},
			pkt:  fromClient,
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be4b.Addr()), macIn},
		},
		{
			name: "ICMP echo to a VIP address with echo on is answered", setup: func(e *progEnv) { e.addAddrEntry(progVIP4, vipFlagEcho) },
			pkt:  echoTo(progClient4, progVIP4),
			want: xdpTX, counters: counts{cRX: 1, cICMPEcho: 1},
			macs: [2]net.HardwareAddr{macClient, macIn},
		},
		{
			name: "ICMPv6 echo to a VIP address with echo on is answered", setup: func(e *progEnv) { e.addAddrEntry(progVIP6, vipFlagEcho) },
			pkt:  echoTo(progClient6, progVIP6),
			want: xdpTX, counters: counts{cRX: 1, cICMPEcho: 1},
			macs: [2]net.HardwareAddr{macClient, macIn},
		},
		{
			name: "ICMP echo to a VIP address with echo off is passed", setup: func(e *progEnv) { e.addAddrEntry(progVIP4, 0) },
			pkt:  echoTo(progClient4, progVIP4),
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "ICMPv6 echo to a VIP address with echo off is passed", setup: func(e *progEnv) { e.addAddrEntry(progVIP6, 0) },
			pkt:  echoTo(progClient6, progVIP6),
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "ICMP echo to an address that is no VIP is passed", setup: func(e *progEnv) { e.addAddrEntry(progVIP4, vipFlagEcho) },
			pkt:  echoTo(progClient4, notVIP4),
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "ICMP echo to a VIP with port entries only is passed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			pkt:  echoTo(progClient4, progVIP4),
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "ICMPv4 carried in IPv6 is passed", setup: func(e *progEnv) { e.addAddrEntry(progVIP6, vipFlagEcho) },
			pkt: func() progPkt {
				p := echoTo(progClient4, progVIP4)
				p.src, p.dst = progClient6, progVIP6
				return p
			}(),
			want: xdpPass, counters: counts{cRX: 1, cPassOtherProto: 1},
		},
		{
			name: "frag needed about a DSR flow goes to its backend",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP, be4a)
				e.addAddrEntry(progVIP4, 0)
			},
			raw:  func(t testing.TB) []byte { return tooBigAbout(t, router4, vipReply).frame(t) },
			want: xdpTX, counters: counts{cRX: 1, cICMPErrForwarded: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "packet too big about an IPv6 DSR flow goes to its backend",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP6, be6a)
				e.addAddrEntry(progVIP6, 0)
			},
			raw:  func(t testing.TB) []byte { return tooBigAbout(t, router6, vipReply6).frame(t) },
			want: xdpTX, counters: counts{cRX: 1, cICMPErrForwarded: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(be6a.Addr()), macIn},
		},
		{
			name: "frag needed about a NAT flow is passed",
			setup: func(e *progEnv) {
				e.addFastVIP(natVIP, be4a)
				e.addAddrEntry(progVIP4, 0)
			},
			raw:  func(t testing.TB) []byte { return tooBigAbout(t, router4, vipReply).frame(t) },
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "frag needed about another port of a DSR VIP is passed",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP, be4a)
				e.addAddrEntry(progVIP4, 0)
			},
			raw: func(t testing.TB) []byte {
				q := vipReply
				q.sport = 81
				return tooBigAbout(t, router4, q).frame(t)
			},
			want: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name:  "backend without a neighbour entry is passed to the kernel",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beNoNeigh4, 80)) },
			pkt:   fromClient,
			want:  xdpPass, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cPassNoNeigh: 1},
		},
		{
			name:  "IPv6 backend without a neighbour entry is passed to the kernel",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP6, netip.AddrPortFrom(beNoNeigh6, 53)) },
			pkt:   fromClient6,
			want:  xdpPass, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cPassNoNeigh: 1},
		},
		{
			name:  "backend behind an interface without XDP is passed to the kernel",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beNoXDP4, 80)) },
			pkt:   fromClient,
			want:  xdpPass, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cPassEgressNoXDP: 1},
		},
		{
			name: "backend behind another fast-path interface is redirected there",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP, netip.AddrPortFrom(beRedir4, 80))
				e.addTxPort(linkRedir)
			},
			pkt:  fromClient,
			want: xdpRedirect, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cRedirect: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(beRedir4), macRedir},
		},
		{
			name: "IPv6 backend behind another fast-path interface is redirected there",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP6, netip.AddrPortFrom(beRedir6, 53))
				e.addTxPort(linkRedir)
			},
			pkt:  fromClient6,
			want: xdpRedirect, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cRedirect: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(beRedir6), macRedir},
		},
		{
			name:  "backend behind a blackhole route is dropped",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beBlackhole4, 80)) },
			pkt:   fromClient,
			want:  xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cDropFIB: 1},
		},
		{
			name:  "IPIP packet above the route MTU: frag needed to the client",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80)) },
			pkt:   bigFrom(fromClient, progRouteMTU),
			want:  xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU-20) },
		},
		{
			name:  "IPIP packet of a VLAN above the route MTU: frag needed to the client, tagged",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80)) },
			pkt:   bigFrom(fromClient, progRouteMTU+1).tagged(42), // a quote of 4n+1 bytes
			want:  xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU-20) },
		},
		{
			name: "GUE packet above the route MTU: frag needed to the client",
			setup: func(e *progEnv) {
				v := dsrVIP
				v.forward = fwdDSRGUE
				e.addFastVIP(v, netip.AddrPortFrom(beSmallMTU4, 80))
			},
			pkt:  bigFrom(fromClient, progRouteMTU+3), // a quote of 4n+3 bytes
			want: xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU-28) },
		},
		{
			name: "large IPIP packet above the route MTU: the quote stops at 576 bytes",
			setup: func(e *progEnv) {
				e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80))
			},
			pkt:  bigFrom(fromClient, 1400),
			want: xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU-20) },
		},
		{
			name:  "IPv6-in-IPv6 packet above the route MTU: packet too big to the client",
			setup: func(e *progEnv) { e.addFastVIP(dsrTCP6, netip.AddrPortFrom(beSmallMTU6, 80)) },
			pkt:   bigFrom(fromClient6TCP, progRouteMTU6),
			want:  xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU6-40) },
		},
		{
			name: "IPv6 GUE packet above the route MTU: packet too big to the client",
			setup: func(e *progEnv) {
				v := dsrTCP6
				v.forward = fwdDSRGUE
				e.addFastVIP(v, netip.AddrPortFrom(beSmallMTU6, 80))
			},
			pkt:  bigFrom(fromClient6TCP, progRouteMTU6-60),
			want: xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU6-48) },
		},
		{
			name:  "IPv4-in-IPv6 packet above the route MTU: frag needed to the client",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU6, 80)) },
			pkt:   bigFrom(fromClient, progRouteMTU6),
			want:  xdpTX, counters: tooBigSent,
			check: func(t *testing.T, in, out []byte) { wantTooBig(t, in, out, progRouteMTU6-40) },
		},
		{
			name:  "encapsulated IPv4 packet above the route MTU without DF is dropped",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80)) },
			pkt: func() progPkt {
				p := bigFrom(fromClient, progRouteMTU)
				p.df = false
				return p
			}(),
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cDropFragNeeded: 1},
		},
		{
			name:  "encapsulated packet above the route MTU from a multicast source is dropped",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80)) },
			pkt: func() progPkt {
				p := bigFrom(fromClient, progRouteMTU)
				p.src = netip.MustParseAddr("224.0.0.9")
				return p
			}(),
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cDropFragNeeded: 1},
		},
		{
			name:  "encapsulated packet within the route MTU is sent",
			setup: func(e *progEnv) { e.addFastVIP(dsrVIP, netip.AddrPortFrom(beSmallMTU4, 80)) },
			pkt: func() progPkt {
				p := fromClient
				p.payload = make([]byte, progRouteMTU-20-20-20)
				return p
			}(),
			want: xdpTX, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cTX: 1},
			macs: [2]net.HardwareAddr{progNeighMAC(beSmallMTU4), macIn},
		},
		{
			name: "DSR without a node address of the backend's family is dropped",
			setup: func(e *progEnv) {
				c := progDefaultConfig()
				c.NodeV4 = [4]byte{}
				e.setConfig(c)
				e.addFastVIP(dsrVIP, be4a)
			},
			pkt:  fromClient,
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cDropNoNodeAddr: 1},
		},
		{
			name: "L2 DSR to a backend of the other family is dropped",
			setup: func(e *progEnv) {
				v := dsrVIP
				v.forward = fwdDSRL2
				e.addFastVIP(v, be6a)
			},
			pkt:  fromClient,
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cDropFamily: 1},
		},
		{
			name: "a backend's packet is not looked up as a NAT reply while no VIP uses NAT",
			setup: func(e *progEnv) {
				c := progDefaultConfig()
				c.Flags = 0
				e.setConfig(c)
				e.addFastVIP(dsrVIP, be4a)
			},
			pkt:  tcpTo(be4a.Addr(), progNode4, be4a.Port(), progNATMin),
			want: xdpPass, counters: counts{cRX: 1, cPassNotVIP: 1},
		},
		{
			name: "TCP header cut short is passed as malformed", setup: func(e *progEnv) { e.addFastVIP(natVIP, be4a) },
			raw: func(t testing.TB) []byte {
				// tot_len and the frame end agree; the TCP header does
				// not fit in them.
				p := fromClient
				p.payload = nil
				f := p.frame(t)[:14+20+12]
				f[14+3] = 20 + 12
				f[14+10], f[14+11] = 0, 0
				return f
			},
			want: xdpPass, counters: counts{cRX: 1, cPassMalformed: 1},
		},
	} {
		// Every case as the agent runs the program (prefilter, VIP copies
		// in conntrack) and without them.
		inBothModes(t, n, tc.name, func(t *testing.T, e *progEnv) {
			if tc.setup != nil {
				tc.setup(e)
			}
			var frame []byte
			if tc.raw != nil {
				frame = tc.raw(t)
			} else {
				frame = tc.pkt.frame(t)
			}
			v, out := e.run(frame)
			if v != tc.want {
				t.Errorf("verdict %v, want %v", v, tc.want)
			}
			e.wantCounters(nil, tc.counters)
			if tc.check != nil {
				tc.check(t, frame, out)
			}
			if tc.macs[0] != nil && len(out) >= 12 {
				if got := net.HardwareAddr(out[0:6]); got.String() != tc.macs[0].String() {
					t.Errorf("destination MAC %v, want %v", got, tc.macs[0])
				}
				if got := net.HardwareAddr(out[6:12]); got.String() != tc.macs[1].String() {
					t.Errorf("source MAC %v, want %v", got, tc.macs[1])
				}
			}
		})
	}
}

// wantTooBig checks the ICMP "fragmentation needed" (IPv4) or ICMPv6
// "packet too big" the program made of the client's frame in: sent back
// with the MACs swapped and the VLAN tag kept, from the VIP to the client,
// announcing mtu, quoting the start of the client's IP packet up to the
// 576 (IPv4) or 1280 (IPv6) bytes the RFCs allow the whole error, every
// checksum valid.
func wantTooBig(t *testing.T, in, out []byte, mtu int) {
	t.Helper()
	wantTooBigFrom(t, in, out, mtu, netip.Addr{})
}

// wantTooBigFrom is wantTooBig for an error sent from the address from
// (the zero Addr: the quoted packet's destination, the VIP).
func wantTooBigFrom(t *testing.T, in, out []byte, mtu int, from netip.Addr) {
	t.Helper()
	l2 := progL2Len(in)
	wantMACs(t, out, net.HardwareAddr(in[6:12]), net.HardwareAddr(in[0:6]))
	wantEqual(t, "L2 header after the MACs", string(out[12:l2]), string(in[12:l2]))
	orig := in[l2:]
	d := decodeFrame(t, out)
	client, _ := netip.AddrFromSlice(orig[12:16])
	vip, _ := netip.AddrFromSlice(orig[16:20])
	hdr, limit, layer := 20, 576, layers.LayerTypeICMPv4
	if orig[0]>>4 == 6 {
		client, _ = netip.AddrFromSlice(orig[8:24])
		vip, _ = netip.AddrFromSlice(orig[24:40])
		hdr, limit, layer = 40, 1280, layers.LayerTypeICMPv6
	}
	if from.IsValid() {
		vip = from
	}
	wantEqual(t, "source address", d.src(), vip)
	wantEqual(t, "destination address", d.dst(), client)
	quote := min(len(orig), limit-hdr-8)
	if len(d.l3) != hdr+8+quote {
		t.Fatalf("ICMP error of %d bytes (IP header on), want %d: a %d-byte quote of the %d-byte packet", len(d.l3), hdr+8+quote, quote, len(orig))
	}
	proto, err := checkChecksums(d.l3)
	if err != nil {
		t.Errorf("output checksums: %v", err)
	}
	icmp := d.l3[hdr:]
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	if d.ip4 != nil {
		wantEqual(t, "protocol", proto, uint8(layers.IPProtocolICMPv4))
		wantEqual(t, "IPv4 header length", d.ip4.IHL, uint8(5))
		wantEqual(t, "TTL", d.ip4.TTL, uint8(progOuterTTL))
		ic, ok := pkt.Layer(layer).(*layers.ICMPv4)
		if !ok {
			t.Fatalf("no ICMPv4 in the output: %v", pkt)
		}
		wantEqual(t, "ICMP type/code", ic.TypeCode, layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded))
		wantEqual(t, "unused word", binary.BigEndian.Uint16(icmp[4:]), 0)
		wantEqual(t, "next-hop MTU", int(binary.BigEndian.Uint16(icmp[6:])), mtu)
	} else {
		wantEqual(t, "next header", proto, uint8(layers.IPProtocolICMPv6))
		wantEqual(t, "hop limit", d.ip6.HopLimit, uint8(progOuterTTL))
		ic, ok := pkt.Layer(layer).(*layers.ICMPv6)
		if !ok {
			t.Fatalf("no ICMPv6 in the output: %v", pkt)
		}
		wantEqual(t, "ICMPv6 type/code", ic.TypeCode, layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0))
		wantEqual(t, "MTU", int(binary.BigEndian.Uint32(icmp[4:])), mtu)
	}
	if !bytes.Equal(icmp[8:], orig[:quote]) {
		t.Errorf("the quote is not the client's packet's first %d bytes:\n got %x\nwant %x", quote, icmp[8:], orig[:quote])
	}
}
