package fastpath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
)

// malformedEnv is a program with one VIP of each kind, so that every valid
// packet of the kinds below is forwarded (XDP_TX): the PASS or DROP of
// their broken variants then means the program refused them, not that it
// had nothing to do.
func malformedEnv(t testing.TB, n *progNet) *progEnv {
	t.Helper()
	e := newProgEnv(t, n, progSmallTables)
	for i, v := range malformedVIPs {
		v.id = uint32(i + 1)
		e.addFastVIP(v.progVIP, v.be)
	}
	e.addAddrEntry(progVIP4, vipFlagEcho)
	e.addAddrEntry(progVIP6, vipFlagEcho)
	return e
}

// malformedVIPs are the fast VIP entries of malformedEnv, one of each
// forwarding kind, each with one backend.
var malformedVIPs = []struct {
	progVIP
	be netip.AddrPort
}{
	{progVIP{addr: progVIP4, port: 80, proto: ipTCP, forward: fwdNAT}, be4a},
	{progVIP{addr: progVIP4, port: 53, proto: ipUDP, forward: fwdDSRGUE}, be6a},
	{progVIP{addr: progVIP6, port: 80, proto: ipTCP, forward: fwdNAT}, be6a},
	{progVIP{addr: progVIP6, port: 53, proto: ipUDP, forward: fwdDSRIPIP}, be4a},
	{progVIP{addr: progVIP4, port: 443, proto: ipTCP, forward: fwdDSRIPIP}, be4b},
	{progVIP{addr: progVIP6, port: 443, proto: ipUDP, forward: fwdDSRGUE}, be6b},
}

// malformedKinds are valid VIP packets, one of each shape the parser knows.
func malformedKinds(t testing.TB) []struct {
	name  string
	frame []byte
} {
	with := func(p progPkt, f func(*progPkt)) progPkt { f(&p); return p }
	kinds := []struct {
		name string
		pkt  progPkt
	}{
		{"IPv4 TCP", tcpTo(progClient4, progVIP4, 40000, 80)},
		{"IPv4 UDP", udpTo(progClient4, progVIP4, 40000, 53)},
		{"IPv4 ICMP echo", echoTo(progClient4, progVIP4)},
		{"IPv4 with options, UDP", with(udpTo(progClient4, progVIP4, 40000, 53), func(p *progPkt) { p.ipOptions = true })},
		{"VLAN IPv4 TCP", tcpTo(progClient4, progVIP4, 40000, 443).tagged(42)},
		{"IPv4 frag needed about a DSR flow", tooBigAbout(t, router4, tcpTo(progVIP4, progClient4, 443, 40000))},
		{"IPv6 TCP", tcpTo(progClient6, progVIP6, 40000, 80)},
		{"IPv6 UDP", udpTo(progClient6, progVIP6, 40000, 53)},
		{"IPv6 ICMPv6 echo", echoTo(progClient6, progVIP6)},
		{"IPv6 extension headers, TCP", with(tcpTo(progClient6, progVIP6, 40000, 80), func(p *progPkt) { p.v6Ext = true })},
		{"VLAN IPv6 UDP", udpTo(progClient6, progVIP6, 40000, 443).tagged(42)},
		{"IPv6 packet too big about a DSR flow", tooBigAbout(t, router6, udpTo(progVIP6, progClient6, 443, 40000))},
	}
	var out []struct {
		name  string
		frame []byte
	}
	for _, k := range kinds {
		f := k.pkt.frame(t)
		// Without gopacket's padding to 60 bytes, so that every cut
		// shortens the IP packet.
		out = append(out, struct {
			name  string
			frame []byte
		}{k.name, f[:progL2Len(f)+ipLen(f[progL2Len(f):])]})
	}
	return out
}

// ipLen is the length an IP packet's header gives it.
func ipLen(ip []byte) int {
	if ip[0]>>4 == 4 {
		return int(binary.BigEndian.Uint16(ip[2:]))
	}
	return 40 + int(binary.BigEndian.Uint16(ip[4:]))
}

// l4Off is the offset of the L4 header of a frame this file builds.
func l4Off(f []byte) int {
	l3 := progL2Len(f)
	if f[l3]>>4 == 4 {
		return l3 + int(f[l3]&0xf)*4
	}
	off, nh := l3+40, f[l3+6]
	for nh == 0 || nh == 60 {
		nh, off = f[off], off+(int(f[off+1])+1)*8
	}
	return off
}

func refused(v progVerdict) bool { return v == xdpPass || v == xdpDrop }

// TestProgTruncated cuts valid VIP packets of every kind at every length:
// the program must never forward a cut packet. Below the 14 bytes of an
// Ethernet header the kernel refuses the test run itself.
func TestProgTruncated(t *testing.T) {
	n := newProgNet(t)
	e := malformedEnv(t, n)
	for _, k := range malformedKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			if v, _ := e.run(k.frame); v != xdpTX {
				t.Fatalf("the whole packet: verdict %v, want XDP_TX", v)
			}
			for cut := range len(k.frame) {
				v, _, err := e.runErr(k.frame[:cut])
				switch {
				case cut < 14:
					if err == nil {
						t.Errorf("%d bytes: the kernel ran the program (verdict %v) on less than an Ethernet header", cut, v)
					}
				case err != nil:
					t.Errorf("%d bytes: %v", cut, err)
				case !refused(v):
					t.Errorf("cut to %d of %d bytes: verdict %v, want XDP_PASS or XDP_DROP", cut, len(k.frame), v)
				}
			}
		})
	}
}

// TestProgCorruptHeaders breaks one header field of a valid VIP packet at
// a time (keeping the IPv4 header checksum right, so the broken field is
// the only fault): the program must pass or drop every one, never send it
// on. Several put the L4 header beyond the IP packet's own length but
// inside the frame, as Ethernet padding of a short frame would be: the
// parser must bound L4 by the IP length, not only by the frame's end.
func TestProgCorruptHeaders(t *testing.T) {
	n := newProgNet(t)
	e := malformedEnv(t, n)
	kinds := map[string][]byte{}
	for _, k := range malformedKinds(t) {
		kinds[k.name] = k.frame
	}
	// pad appends Ethernet padding, as a short frame on the wire has.
	pad := func(f []byte) []byte { return append(f, make([]byte, 32)...) }
	setTotLen := func(f []byte, n int) {
		l3 := progL2Len(f)
		binary.BigEndian.PutUint16(f[l3+2:], uint16(n))
		fixIPv4Checksum(f, l3)
	}
	setPayloadLen := func(f []byte, n int) { binary.BigEndian.PutUint16(f[progL2Len(f)+4:], uint16(n)) }
	type corruption struct {
		name   string
		kind   string
		mutate func(f []byte) []byte
	}
	cases := []corruption{
		{"IPv4 IHL beyond tot_len", "IPv4 TCP", func(f []byte) []byte {
			f[14] = 0x4f
			fixIPv4Checksum(f, 14)
			return pad(f)
		}},
		{"IP version 6 in an IPv4 frame", "IPv4 TCP", func(f []byte) []byte { f[14] = 0x65; return f }},
		{"IPv4 tot_len beyond the frame", "IPv4 TCP", func(f []byte) []byte { setTotLen(f, len(f)-14+1); return f }},
		{"IPv4 tot_len 0xffff", "IPv4 UDP", func(f []byte) []byte { setTotLen(f, 0xffff); return f }},
		{"IPv4 tot_len shorter than the IP header", "IPv4 TCP", func(f []byte) []byte { setTotLen(f, 19); return pad(f) }},
		{"IPv4 tot_len 0", "IPv4 UDP", func(f []byte) []byte { setTotLen(f, 0); return f }},
		{"TCP data offset beyond the IP packet", "IPv4 TCP", func(f []byte) []byte { f[l4Off(f)+12] = 0xf0; return f }},
		{"TCP header beyond tot_len, inside the frame's padding", "IPv4 TCP", func(f []byte) []byte { setTotLen(f, 20+10); return pad(f) }},
		{"UDP header beyond tot_len, inside the frame's padding", "IPv4 UDP", func(f []byte) []byte { setTotLen(f, 20+4); return pad(f) }},
		{"UDP length field beyond the IP packet", "IPv4 UDP", func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[l4Off(f)+4:], 0x3030)
			f[l4Off(f)+6], f[l4Off(f)+7] = 0, 0 // no checksum, so only the length is wrong
			return f
		}},
		{"UDP length field below the UDP header", "IPv4 UDP", func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[l4Off(f)+4:], 4)
			f[l4Off(f)+6], f[l4Off(f)+7] = 0, 0
			return f
		}},
		{"IPv6 UDP length field beyond the IP packet", "IPv6 UDP", func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[l4Off(f)+4:], 0x3030)
			return f
		}},
		{"ICMP header beyond tot_len, inside the frame's padding", "IPv4 ICMP echo", func(f []byte) []byte { setTotLen(f, 20+4); return pad(f) }},
		{"VLAN: TCP header beyond tot_len, inside the frame's padding", "VLAN IPv4 TCP", func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[18+2:], 20+10)
			fixIPv4Checksum(f, 18)
			return pad(f)
		}},
		{"quoted ports beyond the ICMP packet, inside the frame's padding", "IPv4 frag needed about a DSR flow", func(f []byte) []byte {
			setTotLen(f, 20+8+20)
			return pad(f)
		}},
		{"quoted IPv4 header with IHL 4", "IPv4 frag needed about a DSR flow", func(f []byte) []byte {
			f[l4Off(f)+8] = 0x44
			return f
		}},
		{"IPv6 payload length beyond the frame", "IPv6 TCP", func(f []byte) []byte { setPayloadLen(f, len(f)-54+1); return f }},
		{"IPv6 payload length 0xffff", "IPv6 UDP", func(f []byte) []byte { setPayloadLen(f, 0xffff); return f }},
		{"IPv6 payload length 0 without a jumbo option", "IPv6 TCP", func(f []byte) []byte { setPayloadLen(f, 0); return pad(f) }},
		{"IPv6 TCP header beyond the payload length, inside the frame's padding", "IPv6 TCP", func(f []byte) []byte { setPayloadLen(f, 10); return pad(f) }},
		{"IPv6 UDP header beyond the payload length, inside the frame's padding", "IPv6 UDP", func(f []byte) []byte { setPayloadLen(f, 4); return pad(f) }},
		{"IPv6 ICMPv6 header beyond the payload length, inside the frame's padding", "IPv6 ICMPv6 echo", func(f []byte) []byte { setPayloadLen(f, 4); return pad(f) }},
		{"IPv6 extension header longer than the frame", "IPv6 extension headers, TCP", func(f []byte) []byte { f[54+1] = 255; return f }},
		{"IPv6 TCP header beyond the payload length after extension headers", "IPv6 extension headers, TCP", func(f []byte) []byte {
			setPayloadLen(f, 16)
			return pad(f)
		}},
		{"quoted ports beyond the ICMPv6 packet, inside the frame's padding", "IPv6 packet too big about a DSR flow", func(f []byte) []byte {
			setPayloadLen(f, 8+40)
			return pad(f)
		}},
		{"VLAN tag cut short", "VLAN IPv4 TCP", func(f []byte) []byte { return f[:16] }},
		{"IPv6 packet in an IPv4 frame", "IPv6 UDP", func(f []byte) []byte { f[12], f[13] = 0x08, 0x00; return f }},
		{"IPv4 packet in an IPv6 frame", "IPv4 UDP", func(f []byte) []byte { f[12], f[13] = 0x86, 0xdd; return pad(f) }},
	}
	for ihl := range 5 {
		cases = append(cases, corruption{fmt.Sprintf("IPv4 IHL %d", ihl), "IPv4 TCP", func(f []byte) []byte {
			f[14] = 0x40 | byte(ihl)
			fixIPv4Checksum(f, 14)
			return f
		}})
	}
	for doff := range 5 {
		for _, kind := range []string{"IPv4 TCP", "IPv6 TCP", "IPv6 extension headers, TCP"} {
			cases = append(cases, corruption{fmt.Sprintf("TCP data offset %d, %s", doff, kind), kind, func(f []byte) []byte {
				off := l4Off(f) + 12
				f[off] = byte(doff<<4) | f[off]&0xf
				return f
			}})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, ok := kinds[tc.kind]
			if !ok {
				t.Fatalf("no packet kind %q", tc.kind)
			}
			if v, _ := e.run(base); v != xdpTX {
				t.Fatalf("the valid packet: verdict %v, want XDP_TX", v)
			}
			f := tc.mutate(append([]byte(nil), base...))
			v, out := e.run(f)
			if !refused(v) {
				t.Errorf("verdict %v, want XDP_PASS or XDP_DROP\n in %x\nout %x", v, f, out)
			}
		})
	}
}
