package fastpath

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// errorAbout is the ICMP error (IPv4 type/code, or the ICMPv6 type of the
// same meaning) that from sends to the source of quoted, quoting its
// first n bytes (n 0: the IP header and 8 bytes, as a router quotes);
// word is the 32 bits after the checksum (the MTU of "too big").
func errorAbout(t testing.TB, from netip.Addr, quoted progPkt, typ, code uint8, word uint16, n int) progPkt {
	q := ipPacketBytes(t, quoted)
	if n == 0 {
		n = int(q[0]&0xf)*4 + 8
		if from.Is6() {
			n = 40 + 8
		}
	}
	q = q[:min(n, len(q))]
	proto := uint8(layers.IPProtocolICMPv4)
	if from.Is6() {
		proto = uint8(layers.IPProtocolICMPv6)
	}
	return progPkt{src: from, dst: quoted.src, proto: proto, icmpType: typ, icmpCode: code, icmpSeq: word, icmpQuote: q}
}

// TestProgNATICMPErrors sends ICMP errors about NAT flows through the
// program, as Linux conntrack translates RELATED errors: an error to the
// VIP about its reply to a client goes to the backend, as about the
// backend's own packet (to the node's SNAT port, or to the client when the
// client address is kept); an error to the node's SNAT address about its
// packet to a backend goes to the client, as about the client's packet to
// the VIP. The output must be the error the other side would have
// received had there been no NAT: outer addresses, the quote byte for
// byte what gopacket makes of that side's packet (so every quoted checksum
// is right) and every checksum recomputed from scratch. Errors about no
// flow keep going to the kernel.
func TestProgNATICMPErrors(t *testing.T) {
	n := newProgNet(t)
	const cport, vport = 34567, 80
	// A router on the client's side, and one on the backend's.
	router4c, router6c := router4, router6
	toBackend := counts{cRX: 1, cICMPNATToBackend: 1, cTX: 1}
	toClient := counts{cRX: 1, cICMPNATToClient: 1, cTX: 1}
	withPayload := func(p progPkt, n int) progPkt {
		p.df = p.src.Is4()
		p.payload = bytes.Repeat([]byte{0xa5, 0x5a, 0x17}, n/3+1)[:n]
		return p
	}

	type flow struct {
		client   progPkt        // the client's packet to the VIP
		be       netip.AddrPort // its backend
		natPort  uint16         // 0 when the client is kept
		nodeAddr netip.Addr
	}
	// reverse is p with source and destination swapped.
	reverse := func(p progPkt, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) progPkt {
		p.src, p.sport, p.dst, p.dport = src, sport, dst, dport
		return p
	}
	for _, tc := range []struct {
		name    string
		forward uint8
		client  progPkt
		be      netip.AddrPort
		// in is the error; want the error the program must forward
		// (whose outer source is in's), wantDst its outer destination.
		in, want func(f flow) progPkt
		verdict  progVerdict
		counters counts
		macs     [2]net.HardwareAddr
	}{
		{
			name: "SNAT: frag needed to the VIP about its IPv4 TCP reply goes to the backend", forward: fwdNAT,
			client: tcpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, progVIP4, vport, progClient4, cport), 1400), 3, 4, 1300, 0)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, f.be.Addr(), f.be.Port(), f.nodeAddr, f.natPort), 1400), 3, 4, 1300, 0)
			},
			verdict: xdpTX, counters: toBackend, macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "SNAT: error quoting the whole IPv4 TCP reply: its TCP checksum is translated too", forward: fwdNAT,
			client: tcpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, progVIP4, vport, progClient4, cport), 101), 11, 0, 0, 1000)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, f.be.Addr(), f.be.Port(), f.nodeAddr, f.natPort), 101), 11, 0, 0, 1000)
			},
			verdict: xdpTX, counters: toBackend, macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "SNAT: error quoting an IPv4 UDP reply without checksum keeps it zero", forward: fwdNAT,
			client: func() progPkt { p := udpTo(progClient4, progVIP4, cport, vport); p.udpNoCsum = true; return p }(), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, reverse(f.client, progVIP4, vport, progClient4, cport), 3, 1, 0, 1000)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router4c, reverse(f.client, f.be.Addr(), f.be.Port(), f.nodeAddr, f.natPort), 3, 1, 0, 1000)
			},
			verdict: xdpTX, counters: toBackend, macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "SNAT: packet too big to the VIP about its IPv6 UDP reply goes to the backend", forward: fwdNAT,
			client: udpTo(progClient6, progVIP6, cport, vport), be: be6a,
			in: func(f flow) progPkt {
				return errorAbout(t, router6c, withPayload(reverse(f.client, progVIP6, vport, progClient6, cport), 1400), 2, 0, 1280, 1232)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router6c, withPayload(reverse(f.client, f.be.Addr(), f.be.Port(), f.nodeAddr, f.natPort), 1400), 2, 0, 1280, 1232)
			},
			verdict: xdpTX, counters: toBackend, macs: [2]net.HardwareAddr{progNeighMAC(be6a.Addr()), macIn},
		},
		{
			name: "client kept: frag needed about the IPv4 TCP reply goes to the backend, about its packet to the client", forward: fwdNATKeepClient,
			client: tcpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, progVIP4, vport, progClient4, cport), 200), 3, 4, 1300, 1000)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router4c, withPayload(reverse(f.client, f.be.Addr(), f.be.Port(), progClient4, cport), 200), 3, 4, 1300, 1000)
			},
			verdict: xdpTX, counters: toBackend, macs: [2]net.HardwareAddr{progNeighMAC(be4a.Addr()), macIn},
		},
		{
			name: "SNAT: port unreachable from the backend to the node goes to the client", forward: fwdNAT,
			client: udpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, f.be.Addr(), reverse(f.client, f.nodeAddr, f.natPort, f.be.Addr(), f.be.Port()), 3, 3, 0, 1000)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, f.be.Addr(), f.client, 3, 3, 0, 1000)
			},
			verdict: xdpTX, counters: toClient, macs: [2]net.HardwareAddr{macGW4, macIn},
		},
		{
			name: "SNAT: frag needed from the backend's side about an IPv4 TCP packet goes to the client", forward: fwdNAT,
			client: withPayload(tcpTo(progClient4, progVIP4, cport, vport), 1400), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, reverse(f.client, f.nodeAddr, f.natPort, f.be.Addr(), f.be.Port()), 3, 4, 1300, 0)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, router4c, f.client, 3, 4, 1300, 0)
			},
			verdict: xdpTX, counters: toClient, macs: [2]net.HardwareAddr{macGW4, macIn},
		},
		{
			name: "SNAT: ICMPv6 port unreachable from the backend goes to the client", forward: fwdNAT,
			client: udpTo(progClient6, progVIP6, cport, vport), be: be6a,
			in: func(f flow) progPkt {
				return errorAbout(t, f.be.Addr(), reverse(f.client, f.nodeAddr, f.natPort, f.be.Addr(), f.be.Port()), 1, 4, 0, 1000)
			},
			want: func(f flow) progPkt {
				return errorAbout(t, f.be.Addr(), f.client, 1, 4, 0, 1000)
			},
			verdict: xdpTX, counters: toClient, macs: [2]net.HardwareAddr{macGW6, macIn},
		},
		{
			name: "an error to the node about a port no mapping holds is passed", forward: fwdNAT,
			client: udpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, f.be.Addr(), reverse(f.client, f.nodeAddr, f.natPort+1, f.be.Addr(), f.be.Port()), 3, 3, 0, 1000)
			},
			verdict: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
		{
			name: "an error to the VIP about a reply to a client without a flow is passed", forward: fwdNAT,
			client: udpTo(progClient4, progVIP4, cport, vport), be: be4a,
			in: func(f flow) progPkt {
				return errorAbout(t, router4c, reverse(f.client, progVIP4, vport, progClient4, cport+1), 3, 4, 1300, 0)
			},
			verdict: xdpPass, counters: counts{cRX: 1, cPassICMP: 1},
		},
	} {
		inBothModes(t, n, tc.name, func(t *testing.T, e *progEnv) {
			e.addFastVIP(progVIP{addr: tc.client.dst, port: vport, proto: tc.client.proto, id: 1, forward: tc.forward}, tc.be)
			e.addAddrEntry(tc.client.dst, 0)
			f := flow{client: tc.client, be: tc.be, nodeAddr: tc.client.src}
			first := tc.client
			first.payload = []byte("first")
			v, out := e.run(first.frame(t))
			if v != xdpTX {
				t.Fatalf("client packet: verdict %v, want XDP_TX", v)
			}
			if tc.forward == fwdNAT {
				f.natPort, _ = decodeFrame(t, out).ports()
				f.nodeAddr = progNode4
				if tc.client.src.Is6() {
					f.nodeAddr = progNode6
				}
			}
			in := tc.in(f).frame(t)
			before := e.counters()
			v, out = e.run(in)
			if v != tc.verdict {
				t.Fatalf("verdict %v, want %v", v, tc.verdict)
			}
			e.wantCounters(before, tc.counters)
			if tc.want == nil {
				if !bytes.Equal(out[:len(in)], in) {
					t.Errorf("a passed error was changed:\n got %x\nwant %x", out[:len(in)], in)
				}
				return
			}
			wantMACs(t, out, tc.macs[0], tc.macs[1])
			want := tc.want(f).frame(t)
			if len(out) < len(want) {
				t.Fatalf("output of %d bytes, want %d", len(out), len(want))
			}
			l2 := progL2Len(want)
			got := out[l2:len(want)]
			if _, err := checkChecksums(got); err != nil {
				t.Errorf("output checksums: %v", err)
			}
			// The quoted IP header's checksum, checked on its own.
			hdr := 20
			if got[0]>>4 == 6 {
				hdr = 40
			}
			quote := got[hdr+8:]
			if quote[0]>>4 == 4 {
				if csumFold16(csumAdd16(0, quote[:int(quote[0]&0xf)*4])) != 0xffff {
					t.Errorf("the quoted IPv4 header's checksum %#04x is wrong", binary.BigEndian.Uint16(quote[10:]))
				}
			}
			if !bytes.Equal(got, want[l2:]) {
				t.Errorf("forwarded error differs from the one the other side would get:\n got %x\nwant %x", got, want[l2:])
			}
		})
	}
}
