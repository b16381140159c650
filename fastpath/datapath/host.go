package datapath

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/novaedge/novaedge/fastpath"
)

const reservedPortsPath = "/proc/sys/net/ipv4/ip_local_reserved_ports"

// reservePorts adds lo-hi to the host's reserved local ports (which also
// applies to IPv6), keeping what an administrator reserved.
func reservePorts(lo, hi uint16) error {
	cur, err := os.ReadFile(reservedPortsPath)
	if err != nil {
		return fmt.Errorf("read %s: %w", reservedPortsPath, err)
	}
	want := fmt.Sprintf("%d-%d", lo, hi)
	have := strings.TrimSpace(string(cur))
	// The kernel merges adjacent ranges ("9999" and "10000-32767" read
	// back as "9999-32767"): look for a range holding ours, not our text.
	// A read-only /proc/sys (an unprivileged pod whose init container set
	// it) then needs no write.
	if reservedCovers(have, lo, hi) {
		return nil
	}
	next := want
	if have != "" {
		next = have + "," + want
	}
	if err := os.WriteFile(reservedPortsPath, []byte(next), 0o644); err != nil {
		return fmt.Errorf("reserve SNAT ports %s in %s: %w", want, reservedPortsPath, err)
	}
	return nil
}

// reservedCovers reports whether one range of the sysctl's list ("a-b,c")
// holds all of lo-hi.
func reservedCovers(list string, lo, hi uint16) bool {
	for _, r := range strings.Split(list, ",") {
		a, b, isRange := strings.Cut(strings.TrimSpace(r), "-")
		if !isRange {
			b = a
		}
		first, err1 := strconv.Atoi(a)
		last, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil && first <= int(lo) && int(hi) <= last {
			return true
		}
	}
	return false
}

// PrepareInterfaces sets what the kernel must allow on the interfaces the
// fast path runs on, in the calling thread's network namespace. A frame
// the program has already rewritten but hands to the kernel (no neighbour
// entry yet, or an egress interface without XDP) carries the node's own
// address as its IPv4 source (SNAT, or the outer header of DSR), which the
// kernel drops as a "martian source" unless accept_local is on; IPv6 has no
// such check. Reverse-path filtering is left as the host has it (loosening
// it would drop DSR replies from the VIP routed back through this node when
// the VIP has no route here); strict filtering (rp_filter=1) may still drop
// those frames until the neighbour is resolved.
func PrepareInterfaces(ifnames []string) error {
	for _, name := range ifnames {
		path := "/proc/sys/net/ipv4/conf/" + name + "/accept_local"
		// Set already (by the chart's init container, say): no write, so a
		// read-only /proc/sys is fine.
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "1" {
			continue
		}
		if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("let the kernel forward frames with the node's own source address on %s (%s): %w", name, path, err)
		}
	}
	return nil
}

func forwardingEnabled() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return false
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v == 1
}

// keepNeighbours makes the kernel keep a resolved neighbour entry for the
// next hop of every backend (a "managed" entry, Linux 5.16+): without one,
// bpf_fib_lookup answers NO_NEIGH and the program has to pass the packet to
// the kernel. Entries of backends that are gone are removed.
func (d *Datapath) keepNeighbours(cfg fastpath.Config) {
	seen := map[string]netlink.Neigh{}
	for _, v := range cfg.VIPs {
		if v.Forward == fastpath.ForwardPass {
			continue
		}
		for _, b := range v.Backends {
			n, ok := nextHop(b.Addr)
			if !ok {
				continue
			}
			seen[fmt.Sprintf("%d/%s", n.LinkIndex, n.IP)] = n
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var kept []netlink.Neigh
	for _, n := range seen {
		if err := netlink.NeighSet(&n); err != nil {
			d.log.Debug("managed neighbour entry", "ip", n.IP, "err", err)
			continue
		}
		kept = append(kept, n)
	}
	for _, old := range d.neigh {
		if _, still := seen[fmt.Sprintf("%d/%s", old.LinkIndex, old.IP)]; still {
			continue
		}
		_ = netlink.NeighDel(&old)
	}
	d.neigh = kept
}

// nextHop returns the managed neighbour entry for the next hop towards a.
func nextHop(a netip.Addr) (netlink.Neigh, bool) {
	routes, err := netlink.RouteGet(net.IP(a.Unmap().AsSlice()))
	if err != nil || len(routes) == 0 {
		return netlink.Neigh{}, false
	}
	r := routes[0]
	ip := net.IP(a.Unmap().AsSlice())
	if r.Gw != nil {
		ip = r.Gw
	}
	family := netlink.FAMILY_V4
	if ip.To4() == nil {
		family = netlink.FAMILY_V6
	}
	return netlink.Neigh{
		LinkIndex: r.LinkIndex, Family: family, IP: ip,
		State: netlink.NUD_NONE, FlagsExt: netlink.NTF_EXT_MANAGED,
	}, true
}
