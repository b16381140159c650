package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// FuzzProgram runs arbitrary frames through the program, configured with a
// VIP of every forwarding kind, echo on both VIP addresses and live NAT
// mappings. The program must never abort, and may only send a frame on
// (XDP_TX, XDP_REDIRECT) that is, by gopacket and the RFCs' length rules,
// a well-formed packet to a fast VIP entry, an ICMP echo request or
// "fragmentation needed" / "packet too big" to a VIP address, or a reply
// matching a NAT mapping.
func FuzzProgram(f *testing.F) {
	n := newProgNet(f)
	e := malformedEnv(f, n)
	// Mappings for the NAT VIPs, so that replies have something to match.
	for _, p := range []progPkt{tcpTo(progClient4, progVIP4, 40000, 80), tcpTo(progClient6, progVIP6, 40000, 80)} {
		if v, _ := e.run(p.frame(f)); v != xdpTX {
			f.Fatalf("priming NAT: verdict %v", v)
		}
	}
	for _, k := range malformedKinds(f) {
		f.Add(k.frame)
	}
	for k := range e.natEntries() {
		src, dst := netip.AddrFrom16(k.Src), netip.AddrFrom16(k.Dst)
		if k.Family == 4 {
			src, dst = netip.AddrFrom4([4]byte(k.Src[:4])), netip.AddrFrom4([4]byte(k.Dst[:4]))
		}
		f.Add(tcpTo(src, dst, k.Sport, k.Dport).frame(f))
	}
	f.Add(progARPFrame(f))

	f.Fuzz(func(t *testing.T, frame []byte) {
		// The kernel refuses less than an Ethernet header, and more than
		// a page less head- and tailroom for a program without frags.
		if len(frame) < 14 || len(frame) > 3000 {
			return
		}
		v, out, err := e.runErr(frame)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		switch v {
		case xdpPass, xdpDrop:
			return
		case xdpTX, xdpRedirect:
		default:
			t.Fatalf("verdict %v\n in %x", v, frame)
		}
		if err := forwardable(e, frame); err != nil {
			t.Fatalf("verdict %v for a frame that is not a VIP packet: %v\n in %x\nout %x", v, err, frame, out)
		}
	})
}

// forwardable returns nil if frame is a packet the fast path may send on,
// judged from gopacket's decoding, the length fields and the VIPs and NAT
// mappings of malformedEnv, and an error saying why not otherwise.
func forwardable(e *progEnv, frame []byte) error {
	// gopacket's view up to L4; what lies above (DNS on port 53, say) is
	// the backend's business.
	var (
		eth layers.Ethernet
		q   layers.Dot1Q
		ip4 layers.IPv4
		ip6 layers.IPv6
		tcp layers.TCP
		udp layers.UDP
		ic4 layers.ICMPv4
		ic6 layers.ICMPv6
	)
	frame = blankOptions(frame)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &q, &ip4, &ip6, &tcp, &udp, &ic4, &ic6)
	parser.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	if err := parser.DecodeLayers(frame, &decoded); err != nil {
		return fmt.Errorf("gopacket: %w", err)
	}
	if parser.Truncated {
		return errors.New("gopacket: truncated")
	}
	if !slices.Contains(decoded, layers.LayerTypeIPv4) && !slices.Contains(decoded, layers.LayerTypeIPv6) {
		return fmt.Errorf("gopacket decoded no IP header: %v", decoded)
	}
	if eth.EthernetType == layers.EthernetTypeDot1Q && (q.Type == layers.EthernetTypeDot1Q || q.Type == layers.EthernetTypeQinQ) {
		return errors.New("more than one VLAN tag")
	}
	l2 := progL2Len(frame)
	ip := frame[l2:]
	if len(ip) < 20 {
		return errors.New("no IP header")
	}
	// The IP packet, by its own length fields, and where its L4 header is.
	var src, dst netip.Addr
	var proto uint8
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		ihl, tot := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || tot < ihl || tot > len(ip) {
			return fmt.Errorf("IPv4 ihl %d, tot_len %d in %d bytes", ihl, tot, len(ip))
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return errors.New("IPv4 fragment")
		}
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		proto, l4 = ip[9], ip[ihl:tot]
	case 6:
		if len(ip) < 40 {
			return errors.New("short IPv6 header")
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if plen == 0 || 40+plen > len(ip) {
			return fmt.Errorf("IPv6 payload length %d in %d bytes", plen, len(ip))
		}
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		off, nh := 40, ip[6]
		for nh == 0 || nh == 43 || nh == 60 || nh == 51 {
			if off+2 > 40+plen {
				return errors.New("IPv6 extension header beyond the packet")
			}
			step := (int(ip[off+1]) + 1) * 8
			if nh == 51 {
				step = (int(ip[off+1]) + 2) * 4
			}
			nh, off = ip[off], off+step
		}
		if off > 40+plen {
			return errors.New("IPv6 extension header beyond the packet")
		}
		proto, l4 = nh, ip[off:40+plen]
	default:
		return fmt.Errorf("IP version %d", ip[0]>>4)
	}
	v4 := src.Is4()
	switch {
	case proto == ipTCP || proto == ipUDP:
		hl := 8
		if proto == ipTCP {
			if len(l4) < 20 {
				return errors.New("TCP header beyond the IP packet")
			}
			hl = int(l4[12]>>4) * 4
			if hl < 20 {
				return errors.New("TCP data offset below 5")
			}
		}
		if len(l4) < hl {
			return fmt.Errorf("L4 header of %d bytes beyond the IP packet (%d bytes left)", hl, len(l4))
		}
		if ulen := int(binary.BigEndian.Uint16(l4[4:])); proto == ipUDP && (ulen < 8 || ulen > len(l4)) {
			return fmt.Errorf("UDP length %d, %d bytes in the IP packet", ulen, len(l4))
		}
		sport, dport := binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:])
		if fastVIP(dst, dport, proto) {
			return nil
		}
		// Not e.nat: the fuzz target may not use the F's helpers.
		var nv fpbpf.FastpathNatValue
		if err := e.objs.FpNat.Lookup(progFlowKey(src, dst, sport, dport, proto), &nv); err == nil {
			return nil
		}
		return fmt.Errorf("%v:%d → %v:%d/%d is no fast VIP and no NAT reply", src, sport, dst, dport, proto)
	case v4 && proto == 1 || !v4 && proto == 58:
		if len(l4) < 8 {
			return errors.New("ICMP header beyond the IP packet")
		}
		if dst != progVIP4 && dst != progVIP6 {
			return fmt.Errorf("ICMP to %v, no VIP address", dst)
		}
		typ, code := l4[0], l4[1]
		if v4 && typ == 8 || !v4 && typ == 128 {
			return nil // echo is on for both VIP addresses
		}
		tooBig := v4 && typ == 3 && code == 4 || !v4 && typ == 2
		if !tooBig {
			return fmt.Errorf("ICMP type %d code %d", typ, code)
		}
		// The quoted VIP → client packet must name a DSR VIP entry, its
		// ports inside the ICMP packet.
		q := l4[8:]
		hl := 40
		if v4 {
			if len(q) < 20 {
				return errors.New("quoted IPv4 header beyond the packet")
			}
			hl = int(q[0]&0xf) * 4
		}
		if hl < 20 || len(q) < hl+4 {
			return errors.New("quoted ports beyond the packet")
		}
		var qsrc netip.Addr
		var qproto uint8
		if v4 {
			qsrc, qproto = netip.AddrFrom4([4]byte(q[12:16])), q[9]
		} else {
			qsrc, qproto = netip.AddrFrom16([16]byte(q[8:24])), q[6]
		}
		if !dsrVIP(qsrc, binary.BigEndian.Uint16(q[hl:]), qproto) {
			return fmt.Errorf("ICMP error about %v:%d/%d, no DSR VIP", qsrc, binary.BigEndian.Uint16(q[hl:]), qproto)
		}
		return nil
	}
	return fmt.Errorf("protocol %d", proto)
}

func fastVIP(addr netip.Addr, port uint16, proto uint8) bool {
	for _, v := range malformedVIPs {
		if v.addr == addr && v.port == port && v.proto == proto {
			return true
		}
	}
	return false
}

func dsrVIP(addr netip.Addr, port uint16, proto uint8) bool {
	for _, v := range malformedVIPs {
		if v.addr == addr && v.port == port && v.proto == proto && v.forward >= fwdDSRIPIP {
			return true
		}
	}
	return false
}

// TestForwardableOracle makes sure FuzzProgram's oracle accepts the valid
// VIP packets and rejects frames the program must not send on.
func TestForwardableOracle(t *testing.T) {
	n := newProgNet(t)
	e := malformedEnv(t, n)
	for _, k := range malformedKinds(t) {
		if err := forwardable(e, k.frame); err != nil {
			t.Errorf("%s: %v", k.name, err)
		}
	}
	shortTCP := tcpTo(progClient4, progVIP4, 40000, 80).frame(t)[:14+20+20]
	shortTCP[14+3] = 20 + 10
	fixIPv4Checksum(shortTCP, 14)
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"ARP", progARPFrame(t)},
		{"TCP to no VIP", tcpTo(progClient4, notVIP4, 40000, 80).frame(t)},
		{"TCP to a VIP's other port", tcpTo(progClient4, progVIP4, 40000, 81).frame(t)},
		{"TCP header beyond tot_len", shortTCP},
		{"IPv4 fragment", func() []byte { p := tcpTo(progClient4, progVIP4, 40000, 80); p.mf = true; return p.frame(t) }()},
		{"ICMP echo to no VIP", echoTo(progClient4, notVIP4).frame(t)},
		{"frag needed about a NAT VIP", tooBigAbout(t, router4, tcpTo(progVIP4, progClient4, 80, 40000)).frame(t)},
		{"reply without a NAT mapping", tcpTo(be4a.Addr(), progNode4, be4a.Port(), 40000).frame(t)},
	} {
		if err := forwardable(e, tc.frame); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// blankOptions returns frame with the options of its IPv4 header and of its
// IPv6 hop-by-hop and destination options headers replaced by padding. The
// program leaves options to the receiver, as a router does; gopacket would
// refuse a packet over their content.
func blankOptions(frame []byte) []byte {
	l2 := progL2Len(frame)
	v4 := len(frame) >= l2+20 && frame[l2]>>4 == 4
	v6 := len(frame) >= l2+40 && frame[l2]>>4 == 6
	if !v4 && !v6 {
		return frame
	}
	frame = slices.Clone(frame)
	if v4 {
		if end := l2 + int(frame[l2]&0xf)*4; end <= len(frame) {
			for i := l2 + 20; i < end; i++ {
				frame[i] = 1 // no operation
			}
		}
		return frame
	}
	off, nh := l2+40, frame[l2+6]
	for range 6 {
		if nh != 0 && nh != 43 && nh != 60 || off+2 > len(frame) {
			break
		}
		end := off + (int(frame[off+1])+1)*8
		if nh != 43 {
			for i := off + 2; i < end && i < len(frame); i++ {
				frame[i] = 0 // Pad1
			}
		}
		nh, off = frame[off], end
	}
	return frame
}
