package controller

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/novaedge/novaedge/ipam"
)

// claim asks for addresses for one VIP: a ProxyVIP with poolRef, or the
// VIP of one or more Services of type LoadBalancer.
type claim struct {
	// vip names the VIP (a ProxyVIP's name or snapshot.ServiceVIPName).
	vip string
	// owner is recorded in the pool's status ("ProxyVIP/name",
	// "Service/ns/name").
	owner string
	// field names where the request comes from, for messages.
	field string
	// pool asked for; empty: any pool with autoAssign.
	pool string
	// families wanted: 4 and/or 6.
	families []int
	// requested are specific addresses asked for; each must lie in an
	// accepted pool (the named one, if any).
	requested []netip.Addr
	// current is what status says the VIP holds: kept while still valid, so
	// a controller restart or a new leader reassigns nothing.
	current []netip.Addr
	created time.Time
}

// allocation is the outcome for one claim.
type allocation struct {
	addrs []netip.Addr
	// pools[i] is the pool addrs[i] came from.
	pools []string
	// released are current addresses that are no longer valid.
	released []netip.Addr
	// problems are messages for the claim's owner (conditions, Events).
	problems []string
}

// allocate decides the addresses of every claim. static are addresses
// ProxyVIPs name in spec.address: never handed out. It is deterministic:
// claims are served oldest first, and addresses already held are kept
// before any new one is chosen, so a restart or a leader change changes no
// allocation.
func allocate(pools []*ipam.Pool, static []netip.Addr, claims []claim) map[string]*allocation {
	claims = slices.Clone(claims)
	slices.SortStableFunc(claims, func(a, b claim) int {
		return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.vip, b.vip))
	})
	byName := map[string]*ipam.Pool{}
	for _, p := range pools {
		byName[p.Name] = p
	}
	taken := map[netip.Addr]string{}
	for _, a := range static {
		taken[a] = ""
	}
	poolOf := func(a netip.Addr) *ipam.Pool {
		for _, p := range pools {
			if p.Contains(a) {
				return p
			}
		}
		return nil
	}
	out := map[string]*allocation{}
	wants := func(c claim, a netip.Addr) bool {
		return slices.Contains(c.families, family(a))
	}

	// Pass 1: keep what is held and still valid.
	for _, c := range claims {
		r := &allocation{}
		out[c.vip] = r
		for _, a := range c.current {
			p := poolOf(a)
			var why string
			switch {
			case !wants(c, a):
				why = fmt.Sprintf("address %s is of a family the VIP no longer asks for", a)
			case p == nil:
				why = fmt.Sprintf("address %s is in no usable ProxyIPPool any more", a)
			case c.pool != "" && p.Name != c.pool:
				why = fmt.Sprintf("address %s belongs to ProxyIPPool %s, not to the requested %s", a, p.Name, c.pool)
			case len(c.requested) > 0 && !slices.Contains(c.requested, a):
				why = fmt.Sprintf("address %s is not among the requested addresses", a)
			case slices.ContainsFunc(r.addrs, func(b netip.Addr) bool { return family(b) == family(a) }):
				why = fmt.Sprintf("address %s is a second address of one family", a)
			}
			if owner, used := taken[a]; why == "" && used {
				why = fmt.Sprintf("address %s is also held by %s", a, cmp.Or(owner, "a ProxyVIP's spec.address"))
			}
			if why != "" {
				r.released = append(r.released, a)
				r.problems = append(r.problems, why+"; released")
				continue
			}
			taken[a] = c.owner
			r.addrs = append(r.addrs, a)
			r.pools = append(r.pools, p.Name)
		}
	}

	// Pass 2: allocate what is missing.
	for _, c := range claims {
		r := out[c.vip]
		for _, fam := range c.families {
			if slices.ContainsFunc(r.addrs, func(a netip.Addr) bool { return family(a) == fam }) {
				continue
			}
			a, p, problem := pick(c, fam, pools, byName, poolOf, taken)
			if problem != "" {
				r.problems = append(r.problems, problem)
				continue
			}
			taken[a] = c.owner
			r.addrs = append(r.addrs, a)
			r.pools = append(r.pools, p)
		}
	}
	return out
}

// pick chooses one address of family fam for c.
func pick(c claim, fam int, pools []*ipam.Pool, byName map[string]*ipam.Pool,
	poolOf func(netip.Addr) *ipam.Pool, taken map[netip.Addr]string) (netip.Addr, string, string) {
	var named *ipam.Pool
	if c.pool != "" {
		if named = byName[c.pool]; named == nil {
			return netip.Addr{}, "", fmt.Sprintf("%s: ProxyIPPool %q does not exist or is not usable (see its conditions)", c.field, c.pool)
		}
	}
	for _, a := range c.requested {
		if family(a) != fam {
			continue
		}
		p := poolOf(a)
		switch {
		case p == nil:
			return netip.Addr{}, "", fmt.Sprintf("%s: address %s is in no ProxyIPPool", c.field, a)
		case named != nil && p != named:
			return netip.Addr{}, "", fmt.Sprintf("%s: address %s is outside ProxyIPPool %s (it belongs to %s)", c.field, a, named.Name, p.Name)
		}
		if owner, used := taken[a]; used {
			return netip.Addr{}, "", fmt.Sprintf("%s: address %s is already held by %s", c.field, a, cmp.Or(owner, "a ProxyVIP's spec.address"))
		}
		return a, p.Name, ""
	}
	inUse := func(a netip.Addr) bool { _, used := taken[a]; return used }
	if named != nil {
		if a, ok := named.Allocate(fam, inUse); ok {
			return a, named.Name, ""
		}
		return netip.Addr{}, "", fmt.Sprintf("%s: ProxyIPPool %s has no free IPv%d address", c.field, named.Name, fam)
	}
	auto := 0
	for _, p := range pools {
		if !p.AutoAssign {
			continue
		}
		auto++
		if a, ok := p.Allocate(fam, inUse); ok {
			return a, p.Name, ""
		}
	}
	if auto == 0 {
		return netip.Addr{}, "", fmt.Sprintf("%s: no ProxyIPPool with autoAssign exists; name one", c.field)
	}
	return netip.Addr{}, "", fmt.Sprintf("%s: no ProxyIPPool with autoAssign has a free IPv%d address", c.field, fam)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}
