package traffic

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// TCP flags the profiles use.
const (
	TCPSyn = 0x02
	TCPAck = 0x10
	TCPPsh = 0x08
)

// IP protocol numbers.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// MinFrame is the smallest frame the generator sends: the bytes its program
// rewrites in every frame (BENCH_FRAME_HEAD), 64 on the wire without FCS.
const MinFrame = 64

// Profile is a kind of traffic.
type Profile struct {
	// Name identifies the profile in flags and reports.
	Name string
	// Proto is ProtoUDP or ProtoTCP.
	Proto uint8
	// TCPFlags are the flags of every TCP segment; unused for UDP.
	TCPFlags uint8
	// Flows is the number of distinct 5-tuples cycled through; 1 sends one
	// fixed 5-tuple (the connection-tracking hit path).
	Flows uint32
	// Doc says in a few words what the profile exercises.
	Doc string
}

// Profiles returns the known traffic profiles, the default ones first.
func Profiles() []Profile {
	return []Profile{
		{Name: "udp", Proto: ProtoUDP, Flows: 65536, Doc: "UDP, 65536 flows (source port and address vary per frame)"},
		{Name: "udp-1flow", Proto: ProtoUDP, Flows: 1, Doc: "UDP, one fixed 5-tuple (conntrack hit path)"},
		{Name: "tcp-syn", Proto: ProtoTCP, TCPFlags: TCPSyn, Flows: 65536, Doc: "TCP SYN, 65536 flows (new connections)"},
		{Name: "tcp-ack", Proto: ProtoTCP, TCPFlags: TCPAck | TCPPsh, Flows: 65536, Doc: "TCP data segments (PSH|ACK) of 65536 flows, mid-flow without a handshake"},
	}
}

// ProfileByName returns the profile called name.
func ProfileByName(name string) (Profile, error) {
	i := slices.IndexFunc(Profiles(), func(p Profile) bool { return p.Name == name })
	if i < 0 {
		return Profile{}, fmt.Errorf("unknown traffic profile %q", name)
	}
	return Profiles()[i], nil
}

// Frame describes flow 0 of a profile's frames; the generator derives flow
// i by adding i%SportSpan to SrcPort and i/SportSpan to Src.
type Frame struct {
	SrcMAC, DstMAC   net.HardwareAddr
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	// Proto is ProtoUDP or ProtoTCP.
	Proto uint8
	// TCPFlags are the TCP flags; a SYN carries no payload.
	TCPFlags uint8
	// Size is the frame length without FCS; 0 means MinFrame.
	Size int
}

// Bytes returns the frame with valid IPv4 and L4 checksums. Bytes beyond
// the IP datagram (a SYN's Ethernet padding) are zero.
func (f Frame) Bytes() ([]byte, error) {
	size := f.Size
	if size == 0 {
		size = MinFrame
	}
	if size < MinFrame || size > 1514 {
		return nil, fmt.Errorf("frame size %d outside [%d, 1514]", size, MinFrame)
	}
	if !f.Src.Is4() || !f.Dst.Is4() || len(f.SrcMAC) != 6 || len(f.DstMAC) != 6 {
		return nil, fmt.Errorf("frame needs IPv4 addresses and Ethernet MACs")
	}
	const eth, ipLen = 14, 20
	var l4Len int
	switch f.Proto {
	case ProtoUDP:
		l4Len = 8
	case ProtoTCP:
		l4Len = 20
	default:
		return nil, fmt.Errorf("protocol %d is neither UDP nor TCP", f.Proto)
	}
	payload := size - eth - ipLen - l4Len
	if f.Proto == ProtoTCP && f.TCPFlags&TCPSyn != 0 {
		payload = 0
	}
	b := make([]byte, size)
	copy(b[0:6], f.DstMAC)
	copy(b[6:12], f.SrcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)

	ip := b[eth : eth+ipLen]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+l4Len+payload))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = f.Proto
	src, dst := f.Src.As4(), f.Dst.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))

	l4 := b[eth+ipLen : eth+ipLen+l4Len+payload]
	binary.BigEndian.PutUint16(l4[0:], f.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], f.DstPort)
	for i := l4Len; i < len(l4); i++ {
		l4[i] = byte(i)
	}
	pseudo := make([]byte, 12)
	copy(pseudo[0:4], src[:])
	copy(pseudo[4:8], dst[:])
	pseudo[9] = f.Proto
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
	if f.Proto == ProtoUDP {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		sum := checksum(checksum(0, pseudo)^0xffff, l4)
		if sum == 0 {
			sum = 0xffff // 0 would mean "no checksum"
		}
		binary.BigEndian.PutUint16(l4[6:], sum)
	} else {
		binary.BigEndian.PutUint32(l4[4:], 1_000_000)
		if f.TCPFlags&TCPAck != 0 {
			binary.BigEndian.PutUint32(l4[8:], 2_000_000)
		}
		l4[12] = 5 << 4
		l4[13] = f.TCPFlags
		binary.BigEndian.PutUint16(l4[14:], 65535)
		binary.BigEndian.PutUint16(l4[16:], checksum(checksum(0, pseudo)^0xffff, l4))
	}
	return b, nil
}

// checksum returns the Internet checksum of b continuing from the folded
// sum start (0 to begin; pass a previous result ^ 0xffff to chain).
func checksum(start uint16, b []byte) uint16 {
	sum := uint32(start)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// CheckFrame reports whether frame is an IPv4 UDP or TCP frame without IP
// options whose IPv4 and L4 checksums are valid (a UDP checksum of 0, "none",
// counts as valid).
func CheckFrame(frame []byte) error {
	const eth = 14
	if len(frame) < eth+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[eth] != 0x45 {
		return fmt.Errorf("not an IPv4 frame without options")
	}
	ip := frame[eth : eth+20]
	if checksum(0, ip) != 0 {
		return fmt.Errorf("bad IPv4 header checksum %#04x", binary.BigEndian.Uint16(ip[10:]))
	}
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if total < 20 || eth+total > len(frame) {
		return fmt.Errorf("IPv4 total length %d does not fit the frame", total)
	}
	l4 := frame[eth+20 : eth+total]
	switch ip[9] {
	case ProtoUDP:
		if len(l4) < 8 {
			return fmt.Errorf("short UDP header")
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return nil
		}
	case ProtoTCP:
		if len(l4) < 20 {
			return fmt.Errorf("short TCP header")
		}
	default:
		return fmt.Errorf("protocol %d is neither UDP nor TCP", ip[9])
	}
	pseudo := make([]byte, 12)
	copy(pseudo[0:8], ip[12:20])
	pseudo[9] = ip[9]
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
	if sum := checksum(checksum(0, pseudo)^0xffff, l4); sum != 0 {
		return fmt.Errorf("bad L4 checksum (protocol %d)", ip[9])
	}
	return nil
}
