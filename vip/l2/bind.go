package l2

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/novaedge/novaedge/vip/l2/internal/linux"
)

// binding counts the announcements of one VIP (one per interface) and
// remembers whether this Announcer added the address.
type binding struct {
	refs  int
	added bool
}

// bind adds addr as a host address on the bind interface, or adopts it when
// it is already there (an adopted address is never removed). IPv6 addresses
// skip duplicate address detection, which would otherwise keep them
// tentative (unusable) for a second, and are deprecated, so that the kernel
// never picks them as the source of its own packets. They get no prefix
// route either: unlike an IPv4 /32, an IPv6 /128 would put a route through
// lo into the main table, where it outranks the route of the VIP's subnet,
// so a restarted agent (the VIP still on lo) would find the VIP's segment
// through lo. The local table's route, which makes the kernel accept the
// VIP's traffic, is added all the same.
func (a *Announcer) bind(addr netip.Addr) error {
	if b := a.bound[addr]; b != nil {
		b.refs++
		return nil
	}
	lo, err := netlink.LinkByName(a.opts.BindInterface)
	if err != nil {
		return fmt.Errorf("find bind interface %s: %w", a.opts.BindInterface, err)
	}
	na := &netlink.Addr{IPNet: hostNet(addr)}
	if addr.Is6() {
		na.Flags = linux.FlagNoDAD | linux.FlagNoPrefixRoute
		na.PreferedLft = 0
		na.ValidLft = linux.InfiniteLifetime
	}
	added := true
	if err := netlink.AddrAdd(lo, na); err != nil {
		if !linux.IsExist(err) {
			return fmt.Errorf("bind on %s: %w", a.opts.BindInterface, err)
		}
		added = false
	}
	a.bound[addr] = &binding{refs: 1, added: added}
	return nil
}

// unbind drops one announcement of addr and removes the address when it was
// the last and this Announcer added it.
func (a *Announcer) unbind(addr netip.Addr) error {
	b := a.bound[addr]
	if b == nil {
		return nil
	}
	if b.refs--; b.refs > 0 {
		return nil
	}
	delete(a.bound, addr)
	if !b.added {
		return nil
	}
	lo, err := netlink.LinkByName(a.opts.BindInterface)
	if err != nil {
		return fmt.Errorf("find bind interface %s: %w", a.opts.BindInterface, err)
	}
	if err := netlink.AddrDel(lo, &netlink.Addr{IPNet: hostNet(addr)}); err != nil && !linux.IsAddrNotAvail(err) {
		return fmt.Errorf("unbind from %s: %w", a.opts.BindInterface, err)
	}
	return nil
}

func hostNet(addr netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(addr.AsSlice()), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}
}

// sysctlRoot is where the per-interface IPv4 settings live; /proc/sys/net
// shows the network namespace of the thread that opens the file.
const sysctlRoot = "/proc/sys/net/ipv4/conf"

// keepKernelOffARP raises arp_ignore to at least 1 (answer only for
// addresses bound on the receiving interface) and arp_announce to at least
// 2 (never use an address from another interface, such as a VIP on lo, as
// the sender of an ARP request) on ifname. The kernel applies the larger of
// the interface's value and conf/all's, so raising the interface's is
// enough. Values are raised only: a stricter setting stays.
func keepKernelOffARP(ifname string, log *slog.Logger) error {
	for _, s := range []struct {
		name string
		min  int
	}{{"arp_ignore", 1}, {"arp_announce", 2}} {
		if err := raiseSysctl(filepath.Join(sysctlRoot, ifname, s.name), s.min, log); err != nil {
			return fmt.Errorf("keep the kernel from answering arp on %s: %w", ifname, err)
		}
	}
	return nil
}

func raiseSysctl(path string, min int, log *slog.Logger) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if cur >= min {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(min)), 0o644); err != nil {
		return fmt.Errorf("write %d to %s: %w", min, path, err)
	}
	log.Info("sysctl raised", "path", path, "from", cur, "to", min)
	return nil
}
