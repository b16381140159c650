package l2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/novaedge/novaedge/vip/l2/internal/rawsock"
)

// ARP over Ethernet for IPv4 (RFC 826): the only form the responder reads
// and writes.
const (
	etherTypeARP = 0x0806
	arpLen       = 28
	arpHWEther   = 1
	arpProtoIPv4 = 0x0800
	arpRequest   = 1
	arpReply     = 2
	minFrame     = 60 // Ethernet minimum without the FCS
)

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	zeroMAC      = net.HardwareAddr{0, 0, 0, 0, 0, 0}
)

// arpPacket is an Ethernet/IPv4 ARP packet with its Ethernet addresses.
type arpPacket struct {
	ethDst, ethSrc net.HardwareAddr
	op             uint16
	senderMAC      net.HardwareAddr
	senderIP       netip.Addr
	targetMAC      net.HardwareAddr
	targetIP       netip.Addr
}

// marshal returns the frame, padded to the Ethernet minimum as a NIC would.
func (p *arpPacket) marshal() []byte {
	f := make([]byte, minFrame)
	copy(f[0:6], p.ethDst)
	copy(f[6:12], p.ethSrc)
	binary.BigEndian.PutUint16(f[12:14], etherTypeARP)
	b := f[ethLen:]
	binary.BigEndian.PutUint16(b[0:2], arpHWEther)
	binary.BigEndian.PutUint16(b[2:4], arpProtoIPv4)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:8], p.op)
	copy(b[8:14], p.senderMAC)
	s, t := p.senderIP.As4(), p.targetIP.As4()
	copy(b[14:18], s[:])
	copy(b[18:24], p.targetMAC)
	copy(b[24:28], t[:])
	return f
}

// parseARP decodes an Ethernet/IPv4 ARP frame; ok is false for anything
// else, which the responder ignores.
func parseARP(f []byte) (p arpPacket, ok bool) {
	if len(f) < ethLen+arpLen || binary.BigEndian.Uint16(f[12:14]) != etherTypeARP {
		return p, false
	}
	b := f[ethLen:]
	if binary.BigEndian.Uint16(b[0:2]) != arpHWEther || binary.BigEndian.Uint16(b[2:4]) != arpProtoIPv4 || b[4] != 6 || b[5] != 4 {
		return p, false
	}
	return arpPacket{
		ethDst:    net.HardwareAddr(f[0:6]),
		ethSrc:    net.HardwareAddr(f[6:12]),
		op:        binary.BigEndian.Uint16(b[6:8]),
		senderMAC: net.HardwareAddr(b[8:14]),
		senderIP:  netip.AddrFrom4([4]byte(b[14:18])),
		targetMAC: net.HardwareAddr(b[18:24]),
		targetIP:  netip.AddrFrom4([4]byte(b[24:28])),
	}, true
}

// garpFrames returns the gratuitous ARP frames of one round for vip.
func garpFrames(mode GARPMode, mac net.HardwareAddr, vip netip.Addr) [][]byte {
	var out [][]byte
	if mode == GARPRequest || mode == GARPBoth {
		p := arpPacket{ethDst: broadcastMAC, ethSrc: mac, op: arpRequest, senderMAC: mac, senderIP: vip, targetMAC: zeroMAC, targetIP: vip}
		out = append(out, p.marshal())
	}
	if mode == GARPReply || mode == GARPBoth {
		p := arpPacket{ethDst: broadcastMAC, ethSrc: mac, op: arpReply, senderMAC: mac, senderIP: vip, targetMAC: broadcastMAC, targetIP: vip}
		out = append(out, p.marshal())
	}
	return out
}

func (l *link) sendGARP(vip netip.Addr, mode GARPMode, sent *atomic.Uint64) error {
	for _, f := range garpFrames(mode, l.mac, vip) {
		if err := l.send(l.arp, f, broadcastMAC); err != nil {
			return err
		}
		sent.Add(1)
	}
	return nil
}

// handleARP answers a request for an announced VIP and counts claims of
// one by another MAC.
func (l *link) handleARP(s *sock, kind rawsock.Kind, frame []byte) {
	p, ok := parseARP(frame)
	if !ok || bytes.Equal(p.ethSrc, l.mac) {
		return
	}
	a := l.a
	if l.active(p.senderIP) && !bytes.Equal(p.senderMAC, l.mac) {
		a.count.conflicts.Add(1)
		a.log.Warn("another host claims an announced vip", "interface", l.name, "vip", p.senderIP, "mac", p.senderMAC.String())
	}
	// Requests for another MAC reach the socket only in promiscuous mode.
	if kind != rawsock.Host && kind != rawsock.Broadcast {
		return
	}
	// A request whose sender is its target is someone's announcement, not
	// a question.
	if p.op != arpRequest || p.senderIP == p.targetIP || !l.active(p.targetIP) {
		return
	}
	if !a.fresh() {
		a.count.suppressed.Add(1)
		a.log.Debug("arp request not answered: lease expired", "interface", l.name, "vip", p.targetIP, "from", p.senderIP)
		return
	}
	// A duplicate address probe (sender 0.0.0.0) gets the same reply, to
	// its MAC, as the kernel gives for its own addresses.
	dst := net.HardwareAddr(bytes.Clone(p.senderMAC))
	reply := arpPacket{ethDst: dst, ethSrc: l.mac, op: arpReply, senderMAC: l.mac, senderIP: p.targetIP, targetMAC: dst, targetIP: p.senderIP}
	if err := l.send(s, reply.marshal(), dst); err != nil {
		a.log.Warn("send arp reply", "interface", l.name, "vip", p.targetIP, "error", err)
		return
	}
	a.count.arpReplies.Add(1)
}
