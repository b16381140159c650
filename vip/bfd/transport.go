package bfd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/novaedge/novaedge/vip/bfd/internal/sockopt"
)

// Port is the UDP port single-hop BFD control packets are sent to (RFC
// 5881 §4).
const Port = 3784

// Source ports of single-hop sessions (RFC 5881 §4).
const (
	sourcePortMin = 49152
	sourcePortMax = 65535
)

// listener receives control packets on Port for one address (usually the
// wildcard of its family), with the TTL or hop limit, destination address
// and interface of each packet from IP_RECVTTL / IP_PKTINFO or
// IPV6_RECVHOPLIMIT / IPV6_RECVPKTINFO control messages.
type listener struct {
	conn *net.UDPConn
	p4   *ipv4.PacketConn
	p6   *ipv6.PacketConn
	addr netip.Addr
}

// received is one packet as read from a listener.
type received struct {
	src, dst netip.Addr
	ifindex  int
	ttl      int
}

func listen(addr netip.Addr, port uint16) (*listener, error) {
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return nil, err
	}
	l := &listener{conn: pc.(*net.UDPConn), addr: addr}
	if network == "udp4" {
		l.p4 = ipv4.NewPacketConn(l.conn)
		err = l.p4.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst|ipv4.FlagInterface, true)
	} else {
		l.p6 = ipv6.NewPacketConn(l.conn)
		err = l.p6.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst|ipv6.FlagInterface, true)
	}
	if err != nil {
		_ = l.conn.Close()
		return nil, fmt.Errorf("ask for ttl, destination and interface of received packets: %w", err)
	}
	return l, nil
}

// covers reports whether packets to local reach this listener.
func (l *listener) covers(local netip.Addr) bool {
	if l.addr.Is4() != local.Is4() {
		return false
	}
	return l.addr.IsUnspecified() || l.addr.WithZone("") == local
}

// read reads one packet into b. The TTL is 0 when the kernel did not say,
// which fails the GTSM check like any TTL below 255.
func (l *listener) read(b []byte) (int, received, error) {
	var (
		n   int
		r   received
		src net.Addr
		err error
	)
	if l.p4 != nil {
		var cm *ipv4.ControlMessage
		n, cm, src, err = l.p4.ReadFrom(b)
		if cm != nil {
			r.ttl, r.ifindex = cm.TTL, cm.IfIndex
			r.dst, _ = netip.AddrFromSlice(cm.Dst)
		}
	} else {
		var cm *ipv6.ControlMessage
		n, cm, src, err = l.p6.ReadFrom(b)
		if cm != nil {
			r.ttl, r.ifindex = cm.HopLimit, cm.IfIndex
			r.dst, _ = netip.AddrFromSlice(cm.Dst)
		}
	}
	if err != nil {
		return 0, r, err
	}
	if ua, ok := src.(*net.UDPAddr); ok {
		r.src = ua.AddrPort().Addr().Unmap().WithZone("")
	}
	r.dst = r.dst.Unmap()
	return n, r, nil
}

// portSet hands out source ports so that every session of the speaker has
// its own (RFC 5881 §4: SHOULD be unique among all sessions).
type portSet struct {
	mu    sync.Mutex
	inUse map[uint16]bool
}

// openSender opens the sending socket of a session, bound to cfg.Local and
// a free source port in 49152–65535, with TTL 255 and, when cfg.Interface is
// set, bound to that interface. The socket is created in the network
// namespace of the calling thread.
func (ps *portSet) openSender(cfg SessionConfig) (*net.UDPConn, uint16, error) {
	network := "udp4"
	local := cfg.Local
	if local.Is6() {
		network = "udp6"
		if local.IsLinkLocalUnicast() {
			local = local.WithZone(cfg.Interface)
		}
	}
	lc := net.ListenConfig{Control: sockopt.Sender(cfg.Interface)}
	const span = sourcePortMax - sourcePortMin + 1
	start := rand.IntN(span)
	for i := range span {
		port := uint16(sourcePortMin + (start+i)%span)
		if !ps.reserve(port) {
			continue
		}
		pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(local, port).String())
		if err == nil {
			return pc.(*net.UDPConn), port, nil
		}
		ps.release(port)
		if sockopt.IsAddrInUse(err) {
			continue
		}
		return nil, 0, fmt.Errorf("open socket on %v: %w", netip.AddrPortFrom(local, port), err)
	}
	return nil, 0, fmt.Errorf("open socket on %v: %w", local, errors.New("every source port in 49152-65535 is taken"))
}

func (ps *portSet) reserve(port uint16) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.inUse[port] {
		return false
	}
	if ps.inUse == nil {
		ps.inUse = make(map[uint16]bool)
	}
	ps.inUse[port] = true
	return true
}

func (ps *portSet) release(port uint16) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.inUse, port)
}
