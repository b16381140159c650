package fastpath

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// rewriteRun is what a rewrite check sees: the frame that went in, the one
// that came out, and the description of the input.
type rewriteRun struct {
	e       *progEnv
	pkt     progPkt
	in, out []byte
}

func wantEqual[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func wantMACs(t *testing.T, out []byte, dst, src net.HardwareAddr) {
	t.Helper()
	wantEqual(t, "destination MAC", net.HardwareAddr(out[0:6]).String(), dst.String())
	wantEqual(t, "source MAC", net.HardwareAddr(out[6:12]).String(), src.String())
}

// wantNAT checks a NAT'ed frame: addresses and ports as given (sport 0:
// any port of the SNAT range), everything else of the packet unchanged,
// and every checksum valid.
func wantNAT(t *testing.T, r rewriteRun, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) {
	t.Helper()
	if len(r.out) != len(r.in) {
		t.Fatalf("output of %d bytes, input %d: NAT must not change the length", len(r.out), len(r.in))
	}
	d := decodeFrame(t, r.out)
	wantEqual(t, "source address", d.src(), src)
	wantEqual(t, "destination address", d.dst(), dst)
	gotS, gotD := d.ports()
	if sport == 0 {
		if gotS < progNATMin || gotS > progNATMax {
			t.Errorf("source port %d outside the SNAT range [%d, %d]", gotS, progNATMin, progNATMax)
		}
	} else {
		wantEqual(t, "source port", gotS, sport)
	}
	wantEqual(t, "destination port", gotD, dport)
	if _, err := checkChecksums(d.l3); err != nil {
		t.Errorf("output checksums: %v", err)
	}
	// Only addresses, ports and checksums may differ.
	l2 := progL2Len(r.in)
	wantEqual(t, "L2 header after the MACs", string(r.out[12:l2]), string(r.in[12:l2]))
	in, out := bytes.Clone(r.in[l2:]), bytes.Clone(r.out[l2:])
	for _, b := range [][]byte{in, out} {
		maskAddrsPortsChecksums(b)
	}
	if !bytes.Equal(in, out) {
		t.Errorf("NAT changed more than addresses, ports and checksums:\n in %x\nout %x", in, out)
	}
}

// maskAddrsPortsChecksums zeroes what NAT may change in an IP packet.
func maskAddrsPortsChecksums(ip []byte) {
	var l4 int
	var proto byte
	if ip[0]>>4 == 4 {
		clear(ip[10:12])
		clear(ip[12:20])
		l4, proto = int(ip[0]&0xf)*4, ip[9]
	} else {
		clear(ip[8:40])
		l4, proto = 40, ip[6]
		for proto == 0 || proto == 60 || proto == 43 {
			proto, l4 = ip[l4], l4+(int(ip[l4+1])+1)*8
		}
	}
	clear(ip[l4 : l4+4])
	if proto == ipTCP {
		clear(ip[l4+16 : l4+18])
	} else {
		clear(ip[l4+6 : l4+8])
	}
}

// encapWant describes the outer headers DSR must add.
type encapWant struct {
	dst     netip.Addr // the backend; its family is the outer one
	gue     uint16     // 0: IPIP; else the GUE UDP destination port
	hash    uint32
	tos     uint8
	innerV6 bool
}

// wantEncap checks a DSR-encapsulated frame: the L2 header (MACs aside)
// kept, the outer header field by field, the inner packet byte for byte
// the one received, and every checksum.
func wantEncap(t *testing.T, r rewriteRun, w encapWant) {
	t.Helper()
	l2 := progL2Len(r.in)
	hlen := 20
	if w.dst.Is6() {
		hlen = 40
	}
	if w.gue != 0 {
		hlen += 8
	}
	if len(r.out) != len(r.in)+hlen {
		t.Fatalf("output of %d bytes, want input %d + outer headers %d", len(r.out), len(r.in), hlen)
	}
	if progL2Len(r.out) != l2 {
		t.Fatalf("VLAN tag lost or added: L2 header of %d bytes, input had %d", progL2Len(r.out), l2)
	}
	if l2 == 18 {
		wantEqual(t, "VLAN tag", binary.BigEndian.Uint32(r.out[12:16]), binary.BigEndian.Uint32(r.in[12:16]))
	}
	etherType := layers.EthernetTypeIPv4
	if w.dst.Is6() {
		etherType = layers.EthernetTypeIPv6
	}
	wantEqual(t, "outer ethertype", layers.EthernetType(binary.BigEndian.Uint16(r.out[l2-2:])), etherType)
	// The inner packet, without the Ethernet padding that follows it.
	inner := r.in[l2:]
	if inner[0]>>4 == 4 {
		inner = inner[:binary.BigEndian.Uint16(inner[2:])]
	} else {
		inner = inner[:40+int(binary.BigEndian.Uint16(inner[4:]))]
	}
	if got := r.out[l2+hlen:][:len(inner)]; !bytes.Equal(got, inner) {
		t.Errorf("inner packet changed:\n got %x\nwant %x", got, inner)
	}
	innerProto := layers.IPProtocolIPv4
	if w.innerV6 {
		innerProto = layers.IPProtocolIPv6
	}
	nextProto := innerProto
	if w.gue != 0 {
		nextProto = layers.IPProtocolUDP
	}
	d := decodeFrame(t, r.out)
	if w.dst.Is4() {
		o := d.ip4
		if o == nil {
			t.Fatal("outer header is not IPv4")
		}
		wantEqual(t, "outer IHL", o.IHL, 5)
		wantEqual(t, "outer TOS", o.TOS, w.tos)
		wantEqual(t, "outer total length", int(o.Length), hlen+len(inner))
		wantEqual(t, "outer ID", o.Id, 0)
		wantEqual(t, "outer flags", o.Flags, layers.IPv4DontFragment)
		wantEqual(t, "outer fragment offset", o.FragOffset, 0)
		wantEqual(t, "outer TTL", o.TTL, progOuterTTL)
		wantEqual(t, "outer protocol", o.Protocol, nextProto)
	} else {
		o := d.ip6
		if o == nil {
			t.Fatal("outer header is not IPv6")
		}
		wantEqual(t, "outer traffic class", o.TrafficClass, w.tos)
		wantEqual(t, "outer flow label (the flow hash)", o.FlowLabel, w.hash&0xfffff)
		wantEqual(t, "outer payload length", int(o.Length), hlen-40+len(inner))
		wantEqual(t, "outer hop limit", o.HopLimit, progOuterTTL)
		wantEqual(t, "outer next header", o.NextHeader, nextProto)
	}
	node := progNode4
	if w.dst.Is6() {
		node = progNode6
	}
	wantEqual(t, "outer source", d.src(), node)
	wantEqual(t, "outer destination", d.dst(), w.dst)
	if w.gue != 0 {
		u := r.out[l2+hlen-8 : l2+hlen]
		wantEqual(t, "GUE source port (from the flow hash)", binary.BigEndian.Uint16(u[0:]), uint16(0xc000|w.hash&0x3fff))
		wantEqual(t, "GUE destination port", binary.BigEndian.Uint16(u[2:]), w.gue)
		wantEqual(t, "GUE UDP length", int(binary.BigEndian.Uint16(u[4:])), 8+len(inner))
		wantEqual(t, "GUE UDP checksum", binary.BigEndian.Uint16(u[6:]), 0)
	}
	if _, err := checkChecksums(d.l3, w.gue); err != nil {
		t.Errorf("output checksums: %v", err)
	}
}

// TestProgRewrites checks every rewrite the program makes, field by field,
// with every checksum recomputed from scratch: NAT both ways, each DSR
// encapsulation, L2 DSR and ICMP echo replies.
func TestProgRewrites(t *testing.T) {
	n := newProgNet(t)
	const cport, vport = 34567, 80
	c4tcp := tcpTo(progClient4, progVIP4, cport, vport)
	c6tcp := tcpTo(progClient6, progVIP6, cport, vport)
	c4udp := udpTo(progClient4, progVIP4, cport, vport)
	c6udp := udpTo(progClient6, progVIP6, cport, vport)
	vipOf := func(p progPkt, forward uint8) progVIP {
		return progVIP{addr: p.dst, port: p.dport, proto: p.proto, id: 1, forward: forward}
	}
	with := func(p progPkt, f func(*progPkt)) progPkt { f(&p); return p }
	// snatReply primes a NAT flow with p and returns the backend's reply
	// to the port the program allocated.
	snatReply := func(t *testing.T, e *progEnv, p progPkt, be netip.AddrPort) progPkt {
		t.Helper()
		v, out := e.run(p.frame(t))
		if v != xdpTX {
			t.Fatalf("client packet: verdict %v, want XDP_TX", v)
		}
		sport, _ := decodeFrame(t, out).ports()
		node := progNode4
		if be.Addr().Is6() {
			node = progNode6
		}
		r := p
		r.src, r.dst, r.sport, r.dport = be.Addr(), node, be.Port(), sport
		return r
	}
	keepClientReply := func(t *testing.T, e *progEnv, p progPkt, be netip.AddrPort) progPkt {
		t.Helper()
		if v, _ := e.run(p.frame(t)); v != xdpTX {
			t.Fatalf("client packet: verdict %v, want XDP_TX", v)
		}
		r := p
		r.src, r.dst, r.sport, r.dport = be.Addr(), p.src, be.Port(), p.sport
		return r
	}

	for _, tc := range []struct {
		name    string
		forward uint8
		guePort uint16
		be      netip.AddrPort
		pkt     progPkt
		// reply, if set, turns the case into one of a backend's reply:
		// it sends pkt first and returns the reply to run.
		reply func(t *testing.T, e *progEnv, p progPkt, be netip.AddrPort) progPkt
		check func(t *testing.T, r rewriteRun)
	}{
		{
			name: "SNAT IPv4 TCP", forward: fwdNAT, be: be4a, pkt: c4tcp,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progNode4, 0, be4a.Addr(), be4a.Port())
				wantMACs(t, r.out, progNeighMAC(be4a.Addr()), macIn)
			},
		},
		{
			name: "SNAT IPv6 TCP", forward: fwdNAT, be: be6a, pkt: c6tcp,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progNode6, 0, be6a.Addr(), be6a.Port())
				wantMACs(t, r.out, progNeighMAC(be6a.Addr()), macIn)
			},
		},
		{
			name: "SNAT IPv4 UDP", forward: fwdNAT, be: be4a, pkt: c4udp,
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progNode4, 0, be4a.Addr(), be4a.Port()) },
		},
		{
			name: "SNAT IPv6 UDP", forward: fwdNAT, be: be6a, pkt: c6udp,
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progNode6, 0, be6a.Addr(), be6a.Port()) },
		},
		{
			name: "SNAT IPv4 UDP without checksum keeps checksum zero", forward: fwdNAT, be: be4a,
			pkt: with(c4udp, func(p *progPkt) { p.udpNoCsum = true }),
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progNode4, 0, be4a.Addr(), be4a.Port())
				wantEqual(t, "UDP checksum", binary.BigEndian.Uint16(r.out[14+20+6:]), 0)
			},
		},
		{
			name: "SNAT IPv4 TCP with IP options", forward: fwdNAT, be: be4a,
			pkt:   with(c4tcp, func(p *progPkt) { p.ipOptions = true }),
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progNode4, 0, be4a.Addr(), be4a.Port()) },
		},
		{
			name: "SNAT IPv6 UDP after extension headers", forward: fwdNAT, be: be6a,
			pkt:   with(c6udp, func(p *progPkt) { p.v6Ext = true }),
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progNode6, 0, be6a.Addr(), be6a.Port()) },
		},
		{
			name: "SNAT VLAN-tagged IPv4 TCP keeps the tag", forward: fwdNAT, be: be4a,
			pkt:   c4tcp.tagged(42),
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progNode4, 0, be4a.Addr(), be4a.Port()) },
		},
		{
			name: "DNAT keeping the client, IPv4 TCP", forward: fwdNATKeepClient, be: be4a, pkt: c4tcp,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progClient4, cport, be4a.Addr(), be4a.Port())
				wantMACs(t, r.out, progNeighMAC(be4a.Addr()), macIn)
			},
		},
		{
			name: "DNAT keeping the client, IPv6 UDP", forward: fwdNATKeepClient, be: be6a, pkt: c6udp,
			check: func(t *testing.T, r rewriteRun) { wantNAT(t, r, progClient6, cport, be6a.Addr(), be6a.Port()) },
		},
		{
			name: "SNAT reply, IPv4 TCP", forward: fwdNAT, be: be4a, pkt: c4tcp, reply: snatReply,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progVIP4, vport, progClient4, cport)
				wantMACs(t, r.out, macGW4, macIn)
			},
		},
		{
			name: "SNAT reply, IPv6 UDP", forward: fwdNAT, be: be6a, pkt: c6udp, reply: snatReply,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progVIP6, vport, progClient6, cport)
				wantMACs(t, r.out, macGW6, macIn)
			},
		},
		{
			name: "SNAT reply, IPv4 UDP without checksum", forward: fwdNAT, be: be4a,
			pkt: c4udp, reply: func(t *testing.T, e *progEnv, p progPkt, be netip.AddrPort) progPkt {
				r := snatReply(t, e, p, be)
				r.udpNoCsum = true
				return r
			},
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progVIP4, vport, progClient4, cport)
				wantEqual(t, "UDP checksum", binary.BigEndian.Uint16(r.out[14+20+6:]), 0)
			},
		},
		{
			name: "reply of a DNAT flow keeping the client, IPv4 TCP", forward: fwdNATKeepClient, be: be4a, pkt: c4tcp, reply: keepClientReply,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progVIP4, vport, progClient4, cport)
				wantMACs(t, r.out, macGW4, macIn)
			},
		},
		{
			name: "reply of a DNAT flow keeping the client, IPv6 TCP", forward: fwdNATKeepClient, be: be6a, pkt: c6tcp, reply: keepClientReply,
			check: func(t *testing.T, r rewriteRun) {
				wantNAT(t, r, progVIP6, vport, progClient6, cport)
				wantMACs(t, r.out, macGW6, macIn)
			},
		},
		{
			name: "DSR IPv4 in IPv4", forward: fwdDSRIPIP, be: be4a,
			pkt: with(c4tcp, func(p *progPkt) { p.tos = 0xb8 }),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), hash: hashOf(r.pkt), tos: 0xb8})
				wantMACs(t, r.out, progNeighMAC(be4a.Addr()), macIn)
			},
		},
		{
			name: "DSR IPv6 in IPv6", forward: fwdDSRIPIP, be: be6a,
			pkt: with(c6tcp, func(p *progPkt) { p.tos = 0xb8 }),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be6a.Addr(), hash: hashOf(r.pkt), tos: 0xb8, innerV6: true})
				wantMACs(t, r.out, progNeighMAC(be6a.Addr()), macIn)
			},
		},
		{
			name: "DSR IPv4 in IPv6 (IPv4 VIP, IPv6 backend)", forward: fwdDSRIPIP, be: be6a,
			pkt: with(c4udp, func(p *progPkt) { p.tos = 0x2e }),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be6a.Addr(), hash: hashOf(r.pkt), tos: 0x2e})
			},
		},
		{
			name: "DSR IPv6 in IPv4 (IPv6 VIP, IPv4 backend)", forward: fwdDSRIPIP, be: be4a, pkt: c6udp,
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), hash: hashOf(r.pkt), innerV6: true})
			},
		},
		{
			name: "DSR IPv4 in IPv4 with IP options", forward: fwdDSRIPIP, be: be4a,
			pkt: with(c4tcp, func(p *progPkt) { p.ipOptions = true }),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), hash: hashOf(r.pkt)})
			},
		},
		{
			name: "DSR GUE over IPv4, default port", forward: fwdDSRGUE, be: be4a,
			pkt: with(c4udp, func(p *progPkt) { p.tos = 0x10 }),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), gue: progDefaultGUEPort, hash: hashOf(r.pkt), tos: 0x10})
				wantMACs(t, r.out, progNeighMAC(be4a.Addr()), macIn)
			},
		},
		{
			name: "DSR GUE over IPv6, configured port", forward: fwdDSRGUE, guePort: 5555, be: be6a, pkt: c6tcp,
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be6a.Addr(), gue: 5555, hash: hashOf(r.pkt), innerV6: true})
			},
		},
		{
			name: "DSR GUE, IPv6 VIP over an IPv4 backend", forward: fwdDSRGUE, be: be4a, pkt: c6udp,
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), gue: progDefaultGUEPort, hash: hashOf(r.pkt), innerV6: true})
			},
		},
		{
			name: "DSR IPIP of a VLAN-tagged frame keeps the tag", forward: fwdDSRIPIP, be: be4a, pkt: c4tcp.tagged(42),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be4a.Addr(), hash: hashOf(r.pkt)})
			},
		},
		{
			name: "DSR GUE over IPv6 of a VLAN-tagged frame keeps the tag", forward: fwdDSRGUE, be: be6a, pkt: c6udp.tagged(4094),
			check: func(t *testing.T, r rewriteRun) {
				wantEncap(t, r, encapWant{dst: be6a.Addr(), gue: progDefaultGUEPort, hash: hashOf(r.pkt), innerV6: true})
			},
		},
		{
			name: "DSR L2, IPv4: only the MACs change", forward: fwdDSRL2, be: be4b, pkt: c4tcp,
			check: func(t *testing.T, r rewriteRun) {
				wantMACs(t, r.out, progNeighMAC(be4b.Addr()), macIn)
				if !bytes.Equal(r.out[12:], r.in[12:]) {
					t.Errorf("L2 DSR changed more than the MACs:\n in %x\nout %x", r.in, r.out)
				}
			},
		},
		{
			name: "DSR L2, VLAN-tagged IPv6: only the MACs change", forward: fwdDSRL2, be: be6b, pkt: c6udp.tagged(7),
			check: func(t *testing.T, r rewriteRun) {
				wantMACs(t, r.out, progNeighMAC(be6b.Addr()), macIn)
				if !bytes.Equal(r.out[12:], r.in[12:]) {
					t.Errorf("L2 DSR changed more than the MACs:\n in %x\nout %x", r.in, r.out)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			v := vipOf(tc.pkt, tc.forward)
			v.guePort = tc.guePort
			e.addFastVIP(v, tc.be)
			p := tc.pkt
			if tc.reply != nil {
				p = tc.reply(t, e, p, tc.be)
			}
			in := p.frame(t)
			got, out := e.run(in)
			if got != xdpTX {
				t.Fatalf("verdict %v, want XDP_TX; counters %s", got, fmtCounters(e.counters()))
			}
			tc.check(t, rewriteRun{e: e, pkt: p, in: in, out: out})
		})
	}
}

// TestProgEchoAndICMPErrorRewrites checks ICMP echo replies and the
// encapsulation of "fragmentation needed" / "packet too big" for DSR
// flows, with every checksum recomputed.
func TestProgEchoAndICMPErrorRewrites(t *testing.T) {
	n := newProgNet(t)
	for _, tc := range []struct {
		name string
		pkt  progPkt
	}{
		{"ICMP echo", echoTo(progClient4, progVIP4)},
		{"ICMP echo with IP options", func() progPkt { p := echoTo(progClient4, progVIP4); p.ipOptions = true; return p }()},
		{"ICMP echo, VLAN-tagged", echoTo(progClient4, progVIP4).tagged(100)},
		{"ICMPv6 echo", echoTo(progClient6, progVIP6)},
		{"ICMPv6 echo after extension headers", func() progPkt { p := echoTo(progClient6, progVIP6); p.v6Ext = true; return p }()},
	} {
		t.Run("reply to "+tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			e.addAddrEntry(tc.pkt.dst, vipFlagEcho)
			in := tc.pkt.frame(t)
			v, out := e.run(in)
			if v != xdpTX {
				t.Fatalf("verdict %v, want XDP_TX", v)
			}
			if len(out) != len(in) {
				t.Fatalf("reply of %d bytes, request %d", len(out), len(in))
			}
			wantMACs(t, out, macClient, macIn)
			d := decodeFrame(t, out)
			wantEqual(t, "source", d.src(), tc.pkt.dst)
			wantEqual(t, "destination", d.dst(), tc.pkt.src)
			l2 := progL2Len(in)
			if _, err := checkChecksums(d.l3); err != nil {
				t.Errorf("reply checksums: %v", err)
			}
			var icmpOff int
			if d.ip4 != nil {
				wantEqual(t, "TTL", d.ip4.TTL, progOuterTTL)
				icmpOff = l2 + int(d.ip4.IHL)*4
				wantEqual(t, "ICMP type", out[icmpOff], layers.ICMPv4TypeEchoReply)
			} else {
				wantEqual(t, "hop limit", d.ip6.HopLimit, progOuterTTL)
				icmpOff = len(out) - len(tc.pkt.payload) - 8
				wantEqual(t, "ICMPv6 type", out[icmpOff], layers.ICMPv6TypeEchoReply)
			}
			wantEqual(t, "ICMP code", out[icmpOff+1], 0)
			// Identifier, sequence number and data are echoed unchanged.
			wantEqual(t, "echo identifier, sequence and data", string(out[icmpOff+4:]), string(in[icmpOff+4:]))
		})
	}

	for _, tc := range []struct {
		name    string
		forward uint8
		guePort uint16
		be      netip.AddrPort
		router  netip.Addr
		quoted  progPkt // the VIP → client packet a router could not forward
	}{
		{"frag needed, IPIP to an IPv4 backend", fwdDSRIPIP, 0, be4a, router4, tcpTo(progVIP4, progClient4, 80, 34567)},
		{"frag needed, IPv4 in IPv6", fwdDSRIPIP, 0, be6a, router4, udpTo(progVIP4, progClient4, 80, 34567)},
		{"frag needed, GUE", fwdDSRGUE, 0, be4a, router4, tcpTo(progVIP4, progClient4, 80, 34567)},
		{"packet too big, IPv6 in IPv6", fwdDSRIPIP, 0, be6a, router6, tcpTo(progVIP6, progClient6, 80, 34567)},
		{"packet too big, GUE over IPv6", fwdDSRGUE, 7777, be6a, router6, udpTo(progVIP6, progClient6, 80, 34567)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			e.addFastVIP(progVIP{addr: tc.quoted.src, port: tc.quoted.sport, proto: tc.quoted.proto, id: 1, forward: tc.forward, guePort: tc.guePort}, tc.be)
			e.addAddrEntry(tc.quoted.src, 0)
			icmp := tooBigAbout(t, tc.router, tc.quoted)
			in := icmp.frame(t)
			v, out := e.run(in)
			if v != xdpTX {
				t.Fatalf("verdict %v, want XDP_TX; counters %s", v, fmtCounters(e.counters()))
			}
			// The flow is client → VIP: the quoted packet reversed.
			flow := tcpTo(tc.quoted.dst, tc.quoted.src, tc.quoted.dport, tc.quoted.sport)
			flow.proto = tc.quoted.proto
			gue := tc.guePort
			if tc.forward == fwdDSRGUE && gue == 0 {
				gue = progDefaultGUEPort
			}
			wantEncap(t, rewriteRun{e: e, pkt: icmp, in: in, out: out},
				encapWant{dst: tc.be.Addr(), gue: gue, hash: hashOf(flow), innerV6: tc.router.Is6()})
			wantMACs(t, out, progNeighMAC(tc.be.Addr()), macIn)
		})
	}
}

// TestChecksumVerifier makes sure checkChecksums, on which the rewrite
// tests rely, accepts what gopacket builds and rejects any flipped bit of
// an IPv4 header or of an L4 segment.
func TestChecksumVerifier(t *testing.T) {
	for _, p := range []progPkt{
		tcpTo(progClient4, progVIP4, 1, 2),
		udpTo(progClient4, progVIP4, 1, 2),
		tcpTo(progClient6, progVIP6, 1, 2),
		udpTo(progClient6, progVIP6, 1, 2),
		echoTo(progClient4, progVIP4),
		echoTo(progClient6, progVIP6),
	} {
		ip := ipPacketBytes(t, p)
		if _, err := checkChecksums(ip); err != nil {
			t.Fatalf("%v → %v proto %d: %v", p.src, p.dst, p.proto, err)
		}
		from := 0 // every bit of an IPv4 packet is covered
		if p.src.Is6() {
			from = 40 // the IPv6 header's own fields are not
		}
		for i := from; i < len(ip); i++ {
			for bit := range 8 {
				c := bytes.Clone(ip)
				c[i] ^= 1 << bit
				if _, err := checkChecksums(c); err == nil {
					t.Errorf("%v → %v proto %d: bit %d of byte %d flipped, checksums still accepted", p.src, p.dst, p.proto, bit, i)
				}
			}
		}
	}
}

// TestProgNATChecksumsRandomFlows runs 5 000 random packets per case
// through NAT with and without SNAT, with random client addresses, ports
// and payloads: the incremental checksum updates must give valid
// checksums whatever carries the sums produce, not only for the fixed
// packets of TestProgRewrites. (A carry lost in the final fold shows in
// about one packet in a thousand.) SNAT sends ten packets per flow, as
// the test's port range holds a few hundred flows.
func TestProgNATChecksumsRandomFlows(t *testing.T) {
	n := newProgNet(t)
	rng := rand.New(rand.NewPCG(20261128, 7))
	randAddr := func(v6 bool) netip.Addr {
		if v6 {
			var a [16]byte
			a[0], a[1], a[2], a[3] = 0x20, 0x01, 0x0d, 0xb8
			for i := 8; i < 16; i++ {
				a[i] = byte(rng.Uint32())
			}
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.Uint32()), byte(rng.Uint32()), byte(1 + rng.IntN(254))})
	}
	for _, tc := range []struct {
		name    string
		forward uint8
		v6      bool
		proto   uint8
	}{
		{"SNAT IPv4 TCP", fwdNAT, false, ipTCP},
		{"SNAT IPv4 UDP", fwdNAT, false, ipUDP},
		{"SNAT IPv6 TCP", fwdNAT, true, ipTCP},
		{"keeping the client, IPv4 TCP", fwdNATKeepClient, false, ipTCP},
		{"keeping the client, IPv4 UDP", fwdNATKeepClient, false, ipUDP},
		{"keeping the client, IPv6 UDP", fwdNATKeepClient, true, ipUDP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			vip, be, node := progVIP4, be4a, progNode4
			if tc.v6 {
				vip, be, node = progVIP6, be6a, progNode6
			}
			vport := uint16(1 + rng.IntN(65535))
			e.addFastVIP(progVIP{addr: vip, port: vport, proto: tc.proto, id: 1, forward: tc.forward}, be)
			flows, perFlow := 5000, 1
			if tc.forward == fwdNAT {
				flows, perFlow = 500, 10
			}
			for i := range flows {
				client, cport := randAddr(tc.v6), uint16(1+rng.IntN(65535))
				src, sport := client, cport
				if tc.forward == fwdNAT {
					src, sport = node, 0
				}
				for range perFlow {
					p := udpTo(client, vip, cport, vport)
					if tc.proto == ipTCP {
						p = tcpTo(client, vip, cport, vport)
					}
					p.payload = make([]byte, 1+rng.IntN(64))
					for j := range p.payload {
						p.payload[j] = byte(rng.Uint32())
					}
					in := p.frame(t)
					v, out := e.run(in)
					if v != xdpTX {
						t.Fatalf("flow %d (%s:%d): verdict %v, want XDP_TX; counters %s", i, client, cport, v, fmtCounters(e.counters()))
					}
					wantNAT(t, rewriteRun{e: e, pkt: p, in: in, out: out}, src, sport, be.Addr(), be.Port())
					if t.Failed() {
						t.Fatalf("flow %d: %s:%d → %s:%d, payload %x", i, client, cport, vip, vport, p.payload)
					}
				}
			}
		})
	}
}
