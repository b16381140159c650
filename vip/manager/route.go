package manager

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// mainTable is the kernel's main routing table (RT_TABLE_MAIN).
const mainTable = 254

// routes answers the manager's questions about the host's routing; tests
// replace it.
type routes interface {
	// InterfaceFor returns the interface of the main-table route that
	// covers addr (the route of its subnet, else the default route).
	InterfaceFor(addr netip.Addr) (string, error)
	// SourceFor returns the source address the kernel would use towards
	// peer.
	SourceFor(peer netip.Addr) (netip.Addr, error)
}

// hostRoutes reads the routes of the process's network namespace.
type hostRoutes struct{}

// InterfaceFor looks at the main table only: a VIP already bound on lo
// (by this agent's previous run) has a local-table route through lo, which
// is not where it is announced.
func (hostRoutes) InterfaceFor(addr netip.Addr) (string, error) {
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	rs, err := netlink.RouteListFiltered(family, &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("list routes: %w", err)
	}
	loIndex := 0
	if lo, err := netlink.LinkByName("lo"); err == nil {
		loIndex = lo.Attrs().Index
	}
	best, bestBits := -1, -1
	for _, r := range rs {
		idx := r.LinkIndex
		if idx == 0 && len(r.MultiPath) > 0 {
			idx = r.MultiPath[0].LinkIndex
		}
		if idx == 0 {
			continue
		}
		bits := 0
		if r.Dst != nil {
			p, ok := prefixOf(r.Dst)
			if !ok || !p.Contains(addr) {
				continue
			}
			bits = p.Bits()
			// The VIP's own host route through lo (the kernel adds one
			// for an IPv6 /128 bound there without noprefixroute) says
			// where it is bound, not where it is announced.
			if idx == loIndex && bits == addr.BitLen() {
				continue
			}
		}
		if bits > bestBits {
			best, bestBits = idx, bits
		}
	}
	if best < 0 {
		return "", fmt.Errorf("no route covers %s and there is no default route: name the interface in spec.interfaces", addr)
	}
	l, err := netlink.LinkByIndex(best)
	if err != nil {
		return "", fmt.Errorf("link %d of the route towards %s: %w", best, addr, err)
	}
	name := l.Attrs().Name
	if name == "lo" {
		return "", fmt.Errorf("the route towards %s is through lo: name the interface in spec.interfaces", addr)
	}
	return name, nil
}

// SourceFor asks the kernel for its route towards peer.
func (hostRoutes) SourceFor(peer netip.Addr) (netip.Addr, error) {
	rs, err := netlink.RouteGet(net.IP(peer.AsSlice()))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route towards %s: %w", peer, err)
	}
	for _, r := range rs {
		if a, ok := netip.AddrFromSlice(r.Src); ok && a.IsValid() {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, errors.New("the route towards " + peer.String() + " has no source address")
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}
