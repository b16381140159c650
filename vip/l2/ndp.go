package l2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"

	"github.com/novaedge/novaedge/vip/l2/internal/rawsock"
)

// Frame layout of an untagged Ethernet frame carrying IPv6.
const (
	ethLen       = 14
	ip6Len       = 40
	offNextHdr   = ethLen + 6
	offHopLimit  = ethLen + 7
	offICMPType  = ethLen + ip6Len
	protoICMPv6  = 58
	typeNS       = 135
	typeNA       = 136
	ndpHopLimit  = 255
	etherTypeIP6 = 0x86dd
)

var allNodes = netip.MustParseAddr("ff02::1")

// ndFilter passes only ICMPv6 neighbour solicitations and advertisements
// without extension headers (as RFC 4861 sends them), so that the socket
// does not copy the link's other IPv6 traffic to user space.
var ndFilter = mustAssemble([]bpf.Instruction{
	bpf.LoadAbsolute{Off: offNextHdr, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 4},
	bpf.LoadAbsolute{Off: offICMPType, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: typeNS, SkipTrue: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: typeNA, SkipTrue: 1},
	bpf.RetConstant{Val: 0xffff},
	bpf.RetConstant{Val: 0},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(fmt.Sprintf("assemble ndp filter: %v", err))
	}
	return raw
}

// multicastMAC is the Ethernet address IPv6 multicast group ip maps to
// (RFC 2464 §7).
func multicastMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As16()
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// naFrame builds an Ethernet frame with a neighbour advertisement for
// target, with Override set and the Target Link-Layer Address option.
func naFrame(srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr, solicited bool) ([]byte, error) {
	na := &ndp.NeighborAdvertisement{
		Solicited:     solicited,
		Override:      true,
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: srcMAC}},
	}
	icmp, err := ndp.MarshalMessageChecksum(na, src, dst)
	if err != nil {
		return nil, fmt.Errorf("build neighbour advertisement: %w", err)
	}
	f := make([]byte, ethLen+ip6Len+len(icmp))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:14], etherTypeIP6)
	ip := f[ethLen:]
	ip[0] = 0x60 // version 6, traffic class 0, flow label 0
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(icmp)))
	ip[6] = protoICMPv6
	ip[7] = ndpHopLimit
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	copy(f[ethLen+ip6Len:], icmp)
	return f, nil
}

func (l *link) sendUnsolicitedNA(vip netip.Addr, sent *atomic.Uint64) error {
	f, err := naFrame(l.mac, multicastMAC(allNodes), vip, allNodes, vip, false)
	if err != nil {
		return err
	}
	if err := l.send(l.nd, f, multicastMAC(allNodes)); err != nil {
		return fmt.Errorf("unsolicited neighbour advertisement: %w", err)
	}
	sent.Add(1)
	return nil
}

// ndPacket is a validated neighbour discovery message with the addresses
// the responder needs.
type ndPacket struct {
	ethSrc, ethDst net.HardwareAddr
	src, dst       netip.Addr
	msg            ndp.Message
}

// parseND validates an Ethernet/IPv6/ICMPv6 frame as RFC 4861 §7.1 asks
// (hop limit 255, code 0, a correct checksum) and decodes it; ok is false
// for anything else.
func parseND(frame []byte) (p ndPacket, ok bool) {
	if len(frame) < offICMPType+4 || binary.BigEndian.Uint16(frame[12:14]) != etherTypeIP6 {
		return p, false
	}
	ip := frame[ethLen:]
	if ip[0]>>4 != 6 || ip[6] != protoICMPv6 || ip[7] != ndpHopLimit {
		return p, false
	}
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if len(ip) < ip6Len+plen {
		return p, false
	}
	icmp := ip[ip6Len : ip6Len+plen]
	if len(icmp) < 4 || icmp[1] != 0 {
		return p, false
	}
	p.src = netip.AddrFrom16([16]byte(ip[8:24]))
	p.dst = netip.AddrFrom16([16]byte(ip[24:40]))
	if icmpv6Checksum(p.src, p.dst, icmp) != 0 {
		return p, false
	}
	msg, err := ndp.ParseMessage(icmp)
	if err != nil {
		return p, false
	}
	p.ethDst = net.HardwareAddr(frame[0:6])
	p.ethSrc = net.HardwareAddr(frame[6:12])
	p.msg = msg
	return p, true
}

// icmpv6Checksum returns the ones' complement sum over the IPv6 pseudo
// header and msg, complemented: zero when msg carries a correct checksum.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(binary.BigEndian.Uint16(b))
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[0:4], uint32(len(msg)))
	tail[7] = protoICMPv6
	add(tail[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// linkLayer returns the link-layer address option of direction d, if any.
func linkLayer(opts []ndp.Option, d ndp.Direction) net.HardwareAddr {
	for _, o := range opts {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == d {
			return lla.Addr
		}
	}
	return nil
}

// handleND answers a solicitation for an announced VIP and counts claims of
// one by another MAC.
func (l *link) handleND(s *sock, kind rawsock.Kind, frame []byte) {
	p, ok := parseND(frame)
	if !ok || bytes.Equal(p.ethSrc, l.mac) {
		return
	}
	if kind == rawsock.OtherHost {
		return // unicast to another host, seen only in promiscuous mode
	}
	a := l.a
	switch m := p.msg.(type) {
	case *ndp.NeighborAdvertisement:
		if !l.active(m.TargetAddress) {
			return
		}
		claimed := linkLayer(m.Options, ndp.Target)
		if claimed == nil {
			claimed = p.ethSrc
		}
		if !bytes.Equal(claimed, l.mac) {
			a.count.conflicts.Add(1)
			a.log.Warn("another host claims an announced vip", "interface", l.name, "vip", m.TargetAddress, "mac", claimed.String())
		}
	case *ndp.NeighborSolicitation:
		l.answerNS(s, p, m)
	}
}

func (l *link) answerNS(s *sock, p ndPacket, m *ndp.NeighborSolicitation) {
	a := l.a
	target := m.TargetAddress
	if !l.active(target) {
		return
	}
	sll := linkLayer(m.Options, ndp.Source)
	dad := p.src.IsUnspecified()
	if p.dst.IsMulticast() {
		if group, err := ndp.SolicitedNodeMulticast(target); err != nil || p.dst != group {
			return
		}
	}
	if dad && (sll != nil || !p.dst.IsMulticast()) {
		return // RFC 4861 §7.1.1: invalid duplicate address detection probe
	}
	if !a.fresh() {
		a.count.suppressed.Add(1)
		a.log.Debug("neighbour solicitation not answered: lease expired", "interface", l.name, "vip", target, "from", p.src)
		return
	}
	// RFC 4861 §7.2.4: a probe from :: is answered to all-nodes, without
	// the Solicited flag; anything else straight to the asker.
	dst, dstMAC, solicited := p.src, sll, true
	if dad {
		dst, dstMAC, solicited = allNodes, multicastMAC(allNodes), false
	} else if dstMAC == nil {
		dstMAC = p.ethSrc
	}
	f, err := naFrame(l.mac, dstMAC, target, dst, target, solicited)
	if err != nil {
		a.log.Warn("build neighbour advertisement", "interface", l.name, "vip", target, "error", err)
		return
	}
	if err := l.send(s, f, dstMAC); err != nil {
		a.log.Warn("send neighbour advertisement", "interface", l.name, "vip", target, "error", err)
		return
	}
	a.count.solicitedNAs.Add(1)
}
