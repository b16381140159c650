package decap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Addresses shared by the packet tests and the namespace test: the client
// (inner source), the VIP (inner destination), the load balancer (outer
// source) and the backend (outer destination).
var (
	client4  = netip.MustParseAddr("10.97.0.1")
	client6  = netip.MustParseAddr("fd97::1")
	vip4     = netip.MustParseAddr("10.99.0.10")
	vip6     = netip.MustParseAddr("fd99::10")
	lb4      = netip.MustParseAddr("10.98.0.1")
	lb6      = netip.MustParseAddr("fd98::1")
	backend4 = netip.MustParseAddr("10.98.0.2")
	backend6 = netip.MustParseAddr("fd98::2")
	other4   = netip.MustParseAddr("10.98.0.3")
	other6   = netip.MustParseAddr("fd98::3")

	srcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	dstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

const (
	clientPort = 40001
	serverPort = 7000
	vlanID     = 100
)

// newDecap returns a Decap loaded with opts and closed at the end of the
// test.
func newDecap(t *testing.T, opts Options) *Decap {
	t.Helper()
	d, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// serialize lays out ls with lengths and checksums computed, wiring every
// UDP layer's checksum to the IP layer before it.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	var netLayer gopacket.NetworkLayer
	for _, l := range ls {
		switch l := l.(type) {
		case *layers.IPv4:
			netLayer = l
		case *layers.IPv6:
			netLayer = l
		case *layers.UDP:
			if netLayer == nil {
				t.Fatal("serialize: UDP without an IP layer before it")
			}
			if err := l.SetNetworkLayerForChecksum(netLayer); err != nil {
				t.Fatal(err)
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return bytes.Clone(buf.Bytes())
}

// innerPacket returns the client's UDP datagram to the VIP, of the VIP's
// family, carrying payload: what the fast path encapsulates.
func innerPacket(t testing.TB, vip netip.Addr, payload string) []byte {
	t.Helper()
	udp := &layers.UDP{SrcPort: clientPort, DstPort: serverPort}
	if vip.Is4() {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: client4.AsSlice(), DstIP: vip.AsSlice()}
		return serialize(t, ip, udp, gopacket.Payload(payload))
	}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
		SrcIP: client6.AsSlice(), DstIP: vip.AsSlice()}
	return serialize(t, ip, udp, gopacket.Payload(payload))
}

// outer4 returns an outer IPv4 header as the fast path writes it: no
// options, DF set, TTL 64, from the load balancer to dst.
func outer4(proto layers.IPProtocol, dst netip.Addr) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment,
		Protocol: proto, SrcIP: lb4.AsSlice(), DstIP: dst.AsSlice()}
}

// outer6 returns an outer IPv6 header as the fast path writes it: no
// extension headers, hop limit 64, from the load balancer to dst.
func outer6(next layers.IPProtocol, dst netip.Addr) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next,
		SrcIP: lb6.AsSlice(), DstIP: dst.AsSlice()}
}

// gue returns the outer UDP header of a GUE packet to port.
func gue(port uint16) *layers.UDP {
	return &layers.UDP{SrcPort: 50123, DstPort: layers.UDPPort(port)}
}

// etherType tells the EtherType of a frame whose L2 header is followed by l.
func etherType(t testing.TB, l gopacket.SerializableLayer) layers.EthernetType {
	t.Helper()
	switch l := l.(type) {
	case *layers.IPv4:
		return layers.EthernetTypeIPv4
	case *layers.IPv6:
		return layers.EthernetTypeIPv6
	case *layers.ARP:
		return layers.EthernetTypeARP
	case gopacket.Payload:
		if len(l) > 0 && l[0]>>4 == 6 {
			return layers.EthernetTypeIPv6
		}
		return layers.EthernetTypeIPv4
	}
	t.Fatalf("no EtherType for %T", l)
	return 0
}

// frame returns an Ethernet frame, with an 802.1Q tag if tagged, around ls;
// its EtherType follows from the first of ls. The L2 header is written by
// hand because gopacket pads short frames to 60 bytes, which a program
// that shortened a frame does not do.
func frame(t testing.TB, tagged bool, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	typ := uint16(etherType(t, ls[0]))
	b := append(bytes.Clone(dstMAC), srcMAC...)
	if tagged {
		b = binary.BigEndian.AppendUint16(b, uint16(layers.EthernetTypeDot1Q))
		b = binary.BigEndian.AppendUint16(b, vlanID)
	}
	b = binary.BigEndian.AppendUint16(b, typ)
	return append(b, serialize(t, ls...)...)
}

// patch returns a copy of b with the bytes from off on replaced by v.
func patch(b []byte, off int, v ...byte) []byte {
	c := bytes.Clone(b)
	copy(c[off:], v)
	return c
}

// be16 returns v in network byte order.
func be16(v uint16) []byte {
	return binary.BigEndian.AppendUint16(nil, v)
}

// u16at reads the big-endian 16-bit field at off.
func u16at(b []byte, off int) uint16 {
	return binary.BigEndian.Uint16(b[off:])
}
