package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv6"

	"github.com/novaedge/novaedge/vip/l2/internal/rawsock"
)

// link is the responder of one Ethernet interface: its packet sockets, the
// VIPs it answers for and the multicast groups it joined for them.
type link struct {
	a     *Announcer
	name  string
	ifi   *net.Interface
	nl    netlink.Link
	mac   net.HardwareAddr
	frame int // largest frame to read

	// mu guards the sets the readers consult on every packet; the socket
	// fields change only under Announcer.mu, while no reader needs them.
	mu     sync.RWMutex
	v4     map[netip.Addr]struct{}
	v6     map[netip.Addr]struct{}
	groups map[netip.Addr]int

	arp *sock // nil while no IPv4 VIP is announced
	nd  *sock // nil while no IPv6 VIP is announced
	mc  *ipv6.PacketConn
}

// sock is a packet socket and the signal that it was closed on purpose, so
// that its reader tells a close from a failure.
type sock struct {
	c    *rawsock.Conn
	done chan struct{}
}

func (s *sock) close() error {
	close(s.done)
	return s.c.Close()
}

// openLink looks ifname up in the calling thread's network namespace.
func (a *Announcer) openLink(ifname string) (*link, error) {
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("find interface: %w", err)
	}
	attrs := nl.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface is not an Ethernet link (hardware address %q)", attrs.HardwareAddr)
	}
	mtu := max(attrs.MTU, 1500)
	return &link{
		a:    a,
		name: ifname,
		ifi: &net.Interface{
			Index: attrs.Index, MTU: attrs.MTU, Name: ifname,
			HardwareAddr: attrs.HardwareAddr, Flags: attrs.Flags,
		},
		nl:     nl,
		mac:    attrs.HardwareAddr,
		frame:  mtu + 18, // Ethernet header and a VLAN tag
		v4:     make(map[netip.Addr]struct{}),
		v6:     make(map[netip.Addr]struct{}),
		groups: make(map[netip.Addr]int),
	}, nil
}

// checkNotBound fails when addr is bound on the announce interface itself,
// where the kernel answers for it whatever the lease says.
func (l *link) checkNotBound(addr netip.Addr) error {
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := netlink.AddrList(l.nl, family)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", l.name, err)
	}
	for _, x := range list {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == addr {
			return fmt.Errorf("the address is bound on %s itself, where the kernel answers for it without a lease: remove it from there", l.name)
		}
	}
	return nil
}

// prepareFamily opens the sockets of addr's family on first use. For IPv4
// it first raises arp_ignore and arp_announce, so that the kernel is off the
// ARP path before any VIP of the link is bound.
func (l *link) prepareFamily(v4 bool) error {
	if v4 {
		if l.arp != nil {
			return nil
		}
		if err := keepKernelOffARP(l.name, l.a.log); err != nil {
			return err
		}
		c, err := rawsock.Listen(l.ifi.Index, etherTypeARP, nil)
		if err != nil {
			return fmt.Errorf("open arp socket on %s: %w", l.name, err)
		}
		l.arp = &sock{c: c, done: make(chan struct{})}
		l.a.readers.Add(1)
		go l.serve(l.arp, l.handleARP)
		return nil
	}
	if l.nd != nil {
		return nil
	}
	c, err := rawsock.Listen(l.ifi.Index, etherTypeIP6, ndFilter)
	if err != nil {
		return fmt.Errorf("open ndp socket on %s: %w", l.name, err)
	}
	// The group memberships live on an IPv6 socket of their own: joining
	// through the IP layer makes the kernel program the NIC's multicast
	// filter and send MLD reports, which packet-socket memberships do not.
	uc, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("open multicast membership socket for %s: %w", l.name, err)
	}
	l.mc = ipv6.NewPacketConn(uc)
	l.nd = &sock{c: c, done: make(chan struct{})}
	l.a.readers.Add(1)
	go l.serve(l.nd, l.handleND)
	return nil
}

// serve reads frames from s until it is closed.
func (l *link) serve(s *sock, handle func(*sock, rawsock.Kind, []byte)) {
	defer l.a.readers.Done()
	buf := make([]byte, l.frame)
	for {
		n, kind, err := s.c.Read(buf)
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			// A link going down reports ENETDOWN once; the socket stays.
			l.a.log.Warn("read from packet socket", "interface", l.name, "error", err)
			continue
		}
		if kind == rawsock.Outgoing {
			continue
		}
		handle(s, kind, buf[:n])
	}
}

// add starts answering for addr, joining its solicited-node group if it is
// an IPv6 address and the group is new.
func (l *link) add(addr netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr.Is4() {
		l.v4[addr] = struct{}{}
		return nil
	}
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return fmt.Errorf("solicited-node group of %s: %w", addr, err)
	}
	if l.groups[group] == 0 {
		if err := l.mc.JoinGroup(l.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
			return fmt.Errorf("join %s on %s: %w", group, l.name, err)
		}
	}
	l.groups[group]++
	l.v6[addr] = struct{}{}
	return nil
}

// remove stops answering for addr and leaves its group when no other VIP
// of the link shares it.
func (l *link) remove(addr netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr.Is4() {
		delete(l.v4, addr)
		return nil
	}
	if _, ok := l.v6[addr]; !ok {
		return nil
	}
	delete(l.v6, addr)
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return fmt.Errorf("solicited-node group of %s: %w", addr, err)
	}
	l.groups[group]--
	if l.groups[group] > 0 {
		return nil
	}
	delete(l.groups, group)
	if err := l.mc.LeaveGroup(l.ifi, &net.UDPAddr{IP: group.AsSlice()}); err != nil {
		return fmt.Errorf("leave %s on %s: %w", group, l.name, err)
	}
	return nil
}

// active reports whether addr is answered for on this link.
func (l *link) active(addr netip.Addr) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if addr.Is4() {
		_, ok := l.v4[addr]
		return ok
	}
	_, ok := l.v6[addr]
	return ok
}

func (l *link) empty() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.v4) == 0 && len(l.v6) == 0
}

// closeUnusedFamilies closes the sockets of a family without VIPs.
func (l *link) closeUnusedFamilies() {
	l.mu.RLock()
	no4, no6 := len(l.v4) == 0, len(l.v6) == 0
	l.mu.RUnlock()
	if no4 && l.arp != nil {
		l.logClose("arp socket", l.arp.close())
		l.arp = nil
	}
	if no6 && l.nd != nil {
		l.logClose("ndp socket", l.nd.close())
		l.nd = nil
		// Closing drops whatever memberships are left.
		l.logClose("multicast membership socket", l.mc.Close())
		l.mc = nil
		clear(l.groups)
	}
}

func (l *link) close() {
	l.mu.Lock()
	clear(l.v4)
	clear(l.v6)
	l.mu.Unlock()
	l.closeUnusedFamilies()
}

func (l *link) logClose(what string, err error) {
	if err != nil && !errors.Is(err, net.ErrClosed) {
		l.a.log.Warn("close "+what, "interface", l.name, "error", err)
	}
}

// send writes one frame to dst.
func (l *link) send(s *sock, frame []byte, dst net.HardwareAddr) error {
	if s == nil {
		return fmt.Errorf("no socket open on %s", l.name)
	}
	if err := s.c.Write(frame, dst); err != nil {
		return fmt.Errorf("send on %s: %w", l.name, err)
	}
	return nil
}
