package fastpath

import (
	"net/netip"
	"testing"
)

// Clients in the subnets whose routes have the small MTUs (progRouteMTU,
// progRouteMTU6): the node's replies to them are too big first.
var (
	smallMTUClient4 = beSmallMTU4
	smallMTUClient6 = beSmallMTU6
)

// TestProgNATTooBig runs NAT frames too big for the route out of the node
// through the program, in both directions: a client's packet to a NAT VIP
// whose backend sits behind the small route, and a backend's reply to a
// client behind it. Each must come back as ICMP "fragmentation needed" /
// ICMPv6 "packet too big" to its sender, quoting the packet as the sender
// sent it (the translation undone, so the sender's kernel finds its
// socket), from the VIP to a client and from the node's address to a
// backend, with the route's MTU; the exclusions (IPv4 without DF, a
// multicast source) are dropped and counted as before.
func TestProgNATTooBig(t *testing.T) {
	n := newProgNet(t)
	const cport, vport = 34567, 80
	// big gives p n bytes of a pattern as payload (a quote from the wrong
	// offset shows) and, for IPv4, DF.
	big := func(p progPkt, n int) progPkt {
		p.df = p.src.Is4()
		p.payload = make([]byte, n)
		for i := range p.payload {
			p.payload[i] = byte(i % 251)
		}
		return p
	}
	noDF := func(p progPkt) progPkt { p.df = false; return p }
	noCsum := func(p progPkt) progPkt { p.udpNoCsum = true; return p }
	natFrom := counts{cRX: 1, cCTMiss: 1, cNATCreated: 1, cCTCreated: 1, cICMPTooBigSent: 1}
	natReplied := counts{cRX: 1, cNATReply: 1, cICMPTooBigSent: 1}

	for _, tc := range []struct {
		name    string
		forward uint8
		be      netip.AddrPort
		// client is the first packet of the flow, to the VIP.
		client progPkt
		// reply, if set, makes the case one of the backend's reply: it
		// gets the backend, the client's packet and the SNAT port the
		// program chose (0 when the client is kept) and returns the reply.
		reply func(be netip.AddrPort, c progPkt, natPort uint16) progPkt
		want  progVerdict
		// counters moved by the frame under test (after the client's
		// packet, for a reply).
		counters counts
		mtu      int
		// from is the source the error must have; zero: the VIP.
		from netip.Addr
	}{
		{
			name: "SNAT, IPv4 TCP client packet too big for the backend's route", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: big(tcpTo(progClient4, progVIP4, cport, vport), progRouteMTU),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU,
		},
		{
			name: "SNAT, IPv4 UDP client datagram too big, VLAN-tagged, quote of 4n+1 bytes", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: big(udpTo(progClient4, progVIP4, cport, vport), progRouteMTU+1).tagged(42),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU,
		},
		{
			name: "SNAT, IPv4 UDP client datagram without checksum too big", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: noCsum(big(udpTo(progClient4, progVIP4, cport, vport), progRouteMTU+3)),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU,
		},
		{
			name: "SNAT, IPv4 client packet above 576 bytes: the quote stops there", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: big(tcpTo(progClient4, progVIP4, cport, vport), 1400),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU,
		},
		{
			name: "SNAT, IPv6 TCP client packet too big for the backend's route", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU6, 8080), client: big(tcpTo(progClient6, progVIP6, cport, vport), progRouteMTU6),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU6,
		},
		{
			name: "DNAT keeping the client, IPv4 TCP client packet too big", forward: fwdNATKeepClient,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: big(tcpTo(progClient4, progVIP4, cport, vport), progRouteMTU),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU,
		},
		{
			name: "DNAT keeping the client, IPv6 UDP client datagram too big", forward: fwdNATKeepClient,
			be: netip.AddrPortFrom(beSmallMTU6, 8080), client: big(udpTo(progClient6, progVIP6, cport, vport), progRouteMTU6),
			want: xdpTX, counters: natFrom, mtu: progRouteMTU6,
		},
		{
			name: "SNAT, IPv4 client packet too big without DF is dropped", forward: fwdNAT,
			be: netip.AddrPortFrom(beSmallMTU4, 8080), client: noDF(big(tcpTo(progClient4, progVIP4, cport, vport), progRouteMTU)),
			want: xdpDrop, counters: counts{cRX: 1, cCTMiss: 1, cNATCreated: 1, cCTCreated: 1, cDropFragNeeded: 1},
		},
		{
			name: "SNAT reply, IPv4 TCP too big for the client's route", forward: fwdNAT,
			be: be4a, client: tcpTo(smallMTUClient4, progVIP4, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return big(tcpTo(be.Addr(), progNode4, be.Port(), natPort), progRouteMTU)
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU, from: progNode4,
		},
		{
			name: "SNAT reply, IPv4 UDP too big, VLAN-tagged", forward: fwdNAT,
			be: be4a, client: udpTo(smallMTUClient4, progVIP4, cport, vport).tagged(42),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return big(udpTo(be.Addr(), progNode4, be.Port(), natPort), progRouteMTU+1).tagged(42)
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU, from: progNode4,
		},
		{
			name: "SNAT reply, IPv4 UDP without checksum too big", forward: fwdNAT,
			be: be4a, client: udpTo(smallMTUClient4, progVIP4, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return noCsum(big(udpTo(be.Addr(), progNode4, be.Port(), natPort), progRouteMTU+2))
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU, from: progNode4,
		},
		{
			name: "SNAT reply, IPv6 TCP too big for the client's route", forward: fwdNAT,
			be: be6a, client: tcpTo(smallMTUClient6, progVIP6, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return big(tcpTo(be.Addr(), progNode6, be.Port(), natPort), progRouteMTU6)
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU6, from: progNode6,
		},
		{
			name: "reply keeping the client, IPv4 TCP too big: from the node's address", forward: fwdNATKeepClient,
			be: be4a, client: tcpTo(smallMTUClient4, progVIP4, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, _ uint16) progPkt {
				return big(tcpTo(be.Addr(), c.src, be.Port(), c.sport), progRouteMTU)
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU, from: progNode4,
		},
		{
			name: "reply keeping the client, IPv6 UDP too big: from the node's address", forward: fwdNATKeepClient,
			be: be6a, client: udpTo(smallMTUClient6, progVIP6, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, _ uint16) progPkt {
				return big(udpTo(be.Addr(), c.src, be.Port(), c.sport), progRouteMTU6)
			},
			want: xdpTX, counters: natReplied, mtu: progRouteMTU6, from: progNode6,
		},
		{
			name: "SNAT reply, IPv4 too big without DF is dropped", forward: fwdNAT,
			be: be4a, client: tcpTo(smallMTUClient4, progVIP4, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return noDF(big(tcpTo(be.Addr(), progNode4, be.Port(), natPort), progRouteMTU))
			},
			want: xdpDrop, counters: counts{cRX: 1, cNATReply: 1, cDropFragNeeded: 1},
		},
		{
			name: "SNAT reply within the client's route MTU is forwarded", forward: fwdNAT,
			be: be4a, client: tcpTo(smallMTUClient4, progVIP4, cport, vport),
			reply: func(be netip.AddrPort, c progPkt, natPort uint16) progPkt {
				return big(tcpTo(be.Addr(), progNode4, be.Port(), natPort), progRouteMTU-40)
			},
			want: xdpTX, counters: counts{cRX: 1, cNATReply: 1, cTX: 1},
		},
	} {
		inBothModes(t, n, tc.name, func(t *testing.T, e *progEnv) {
			e.addFastVIP(progVIP{addr: tc.client.dst, port: vport, proto: tc.client.proto, id: 1, forward: tc.forward}, tc.be)
			frame := tc.client.frame(t)
			if tc.reply != nil {
				v, out := e.run(frame)
				if v != xdpTX {
					t.Fatalf("client packet: verdict %v, want XDP_TX", v)
				}
				var natPort uint16
				if tc.forward == fwdNAT {
					natPort, _ = decodeFrame(t, out).ports()
				}
				frame = tc.reply(tc.be, tc.client, natPort).frame(t)
			}
			before := e.counters()
			v, out := e.run(frame)
			if v != tc.want {
				t.Fatalf("verdict %v, want %v", v, tc.want)
			}
			e.wantCounters(before, tc.counters)
			if tc.mtu == 0 {
				return
			}
			wantTooBigFrom(t, frame, out, tc.mtu, tc.from)
			// The quote is the sender's packet byte for byte (checked
			// above); a whole one must also check out on its own.
			d := decodeFrame(t, out)
			hdr := 20
			if d.ip6 != nil {
				hdr = 40
			}
			quote := d.l3[hdr+8:]
			if len(quote) == len(frame)-progL2Len(frame) {
				if _, err := checkChecksums(quote); err != nil {
					t.Errorf("the quoted packet's checksums: %v", err)
				}
			}
		})
	}
}
