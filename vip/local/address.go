package local

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// DefaultInterface is the link an address is bound to when its Interface is
// empty: a Local VIP on the loopback device is served by this host. Note
// that Linux answers ARP for loopback addresses on every interface while
// net.ipv4.conf.*.arp_ignore is 0 (the default), so a Local VIP is not
// hidden from the network by being on lo; L2ARP VIPs (vip/l2) set
// arp_ignore on their interface for that reason.
const DefaultInterface = "lo"

// Address is one address to bind.
type Address struct {
	// Prefix is a host prefix: /32 for IPv4, /128 for IPv6.
	Prefix netip.Prefix
	// Interface is the name of the link to bind the address to. Empty means
	// DefaultInterface ("lo").
	Interface string
}

// String returns the address as "127.0.10.1/32 on lo", the form errors and
// logs use.
func (a Address) String() string {
	iface := a.Interface
	if iface == "" {
		iface = DefaultInterface
	}
	return a.Prefix.String() + " on " + iface
}

// ParseAddress parses a VIP address given either as a bare IP ("127.0.10.1",
// "fd00::1") or as a host prefix ("127.0.10.1/32", "fd00::1/128"), to be bound
// on iface (DefaultInterface when empty). A prefix that covers more than one
// address is rejected: a VIP is one address, and binding a /24 would make the
// whole subnet local.
func ParseAddress(addr, iface string) (Address, error) {
	var p netip.Prefix
	if strings.Contains(addr, "/") {
		var err error
		if p, err = netip.ParsePrefix(addr); err != nil {
			return Address{}, fmt.Errorf("parse vip address %q: %w", addr, err)
		}
	} else {
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			return Address{}, fmt.Errorf("parse vip address %q: %w", addr, err)
		}
		if ip.Zone() != "" {
			return Address{}, fmt.Errorf("parse vip address %q: %w", addr, errZone)
		}
		p = netip.PrefixFrom(ip, ip.BitLen())
	}
	a, err := normalize(Address{Prefix: p, Interface: iface})
	if err != nil {
		return Address{}, fmt.Errorf("parse vip address %q: %w", addr, err)
	}
	return a, nil
}

var errZone = errors.New("an IPv6 zone is not allowed, name the interface instead")

// normalize checks that a is a bindable host address and fills in the default
// interface, so that equal addresses compare equal as map keys.
func normalize(a Address) (Address, error) {
	if !a.Prefix.IsValid() {
		return Address{}, errors.New("invalid prefix")
	}
	ip := a.Prefix.Addr()
	switch {
	case ip.Zone() != "":
		return Address{}, errZone
	case ip.Is4In6():
		// The kernel would bind it as an IPv6 address that no IPv4 client
		// can reach; the caller almost certainly meant the IPv4 form.
		return Address{}, fmt.Errorf("IPv4-mapped address %s: use %s", ip, ip.Unmap())
	case !a.Prefix.IsSingleIP():
		return Address{}, fmt.Errorf("%s is not a host prefix: want /%d", a.Prefix, ip.BitLen())
	case ip.IsUnspecified(), ip.IsMulticast():
		return Address{}, fmt.Errorf("%s cannot be bound as a vip", ip)
	}
	if a.Interface == "" {
		a.Interface = DefaultInterface
	}
	return a, nil
}

// ipNet converts a host prefix to the form netlink takes.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}
}

// compareAddress orders by IP (IPv4 first), then by interface name.
func compareAddress(a, b Address) int {
	if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
		return c
	}
	return strings.Compare(a.Interface, b.Interface)
}

// sortedKeys returns the addresses of set in compareAddress order, so that
// changes, logs and errors come out in a stable order.
func sortedKeys(set map[Address]struct{}) []Address {
	out := make([]Address, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	slices.SortFunc(out, compareAddress)
	return out
}
