package schedule

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/snapshot"
)

// ErrInvalidRequest is wrapped by the error Schedule returns for a request
// it cannot place (empty or duplicate VIP name, unknown mode).
var ErrInvalidRequest = errors.New("invalid schedule request")

// Request asks where one VIP goes.
type Request struct {
	// VIP names the VIP: a ProxyVIP's name, or the VIP of Services of type
	// LoadBalancer (snapshot.ServiceVIPName, snapshot.SharedVIPName).
	VIP string
	// Mode is how the VIP is announced.
	Mode v1alpha1.VIPMode
	// Eligible are the nodes that may serve the VIP now, already filtered by
	// the caller. Order and duplicates do not matter; empty names are
	// ignored.
	Eligible []string
	// Previous is the assignment in force (the VIP's status). The zero value
	// means a new VIP. Names in it that are not eligible are dropped.
	Previous snapshot.Assignment
	// MinHealthyNodes is the VIP's healthPolicy.minHealthyNodes. Zero (and
	// anything below) means 1.
	MinHealthyNodes int32
}

// Result is where one VIP goes.
type Result struct {
	// VIP is the request's VIP.
	VIP string
	// Assignment is who serves the VIP. L2ARP: Active and the other
	// eligible nodes as ordered Standbys. BGP and OSPF: every eligible node
	// in Announcing. Local: every eligible node in Announcing too, because a
	// Local VIP is bound on each serving node's host and announced nowhere,
	// so there is no single owner. With no eligible node the assignment is
	// empty and nobody serves the VIP.
	Assignment snapshot.Assignment
	// Changed reports whether Assignment differs from the request's
	// Previous.
	Changed bool
	// Reason says what changed and why ("active node-a went away: node-b
	// (first standby) takes over"), for events and logs; empty when nothing
	// changed.
	Reason string
	// Serving is the number of nodes in Assignment.
	Serving int
	// MinHealthyNodes is the request's, with zero replaced by 1.
	MinHealthyNodes int
	// Healthy reports whether Serving reaches MinHealthyNodes: the VIP's
	// Ready condition. The VIP is served by whoever remains either way.
	Healthy bool
}

// Schedule places every VIP of reqs and returns one result per request,
// sorted by VIP name. The output depends only on the content of reqs, not
// on the order of the requests or of their node lists.
//
// Actives of L2ARP VIPs are placed in three passes, each over the VIPs in
// name order: VIPs whose active node stays eligible keep it; VIPs whose
// active node left promote their first eligible standby; the remaining VIPs
// (new ones, or with no standby left) take the node holding the fewest
// actives so far, ties broken by rendezvous weight. Counting actives across
// VIPs is why Schedule takes all requests at once.
func Schedule(reqs []Request) ([]Result, error) {
	sorted := slices.Clone(reqs)
	slices.SortStableFunc(sorted, func(a, b Request) int { return cmp.Compare(a.VIP, b.VIP) })
	for i := range sorted {
		r := &sorted[i]
		if r.VIP == "" {
			return nil, fmt.Errorf("vip name is empty: %w", ErrInvalidRequest)
		}
		if i > 0 && sorted[i-1].VIP == r.VIP {
			return nil, fmt.Errorf("vip %q: requested twice: %w", r.VIP, ErrInvalidRequest)
		}
		switch r.Mode {
		case v1alpha1.VIPModeL2ARP, v1alpha1.VIPModeBGP, v1alpha1.VIPModeOSPF, v1alpha1.VIPModeLocal:
		default:
			return nil, fmt.Errorf("vip %q: mode %q is not supported (use L2ARP, BGP, OSPF or Local): %w", r.VIP, r.Mode, ErrInvalidRequest)
		}
	}

	states := make([]*placement, len(sorted))
	for i := range sorted {
		states[i] = newPlacement(&sorted[i])
	}
	// actives counts the L2ARP VIPs each node is active for, so new VIPs
	// go where there are fewest.
	actives := map[string]int{}

	// Pass 1: an active that stays eligible keeps the VIP.
	for _, p := range states {
		if p.l2 && p.eligible[p.req.Previous.Active] {
			p.active = p.req.Previous.Active
			actives[p.active]++
		}
	}
	// Pass 2: an active that left hands over to the first eligible standby,
	// as the agents' heartbeat failover already did.
	for _, p := range states {
		if !p.l2 || p.active != "" {
			continue
		}
		for _, s := range p.req.Previous.Standbys {
			if p.eligible[s] {
				p.active = s
				actives[s]++
				if prev := p.req.Previous.Active; prev != "" {
					p.reasons = append(p.reasons, fmt.Sprintf("active %s went away: %s (first standby) takes over", prev, s))
				} else {
					p.reasons = append(p.reasons, fmt.Sprintf("no active node: %s (first standby) takes over", s))
				}
				break
			}
		}
	}
	// Pass 3: the rest take the least loaded node.
	for _, p := range states {
		if !p.l2 || p.active != "" || len(p.nodes) == 0 {
			continue
		}
		best := p.nodes[0]
		for _, n := range p.nodes[1:] {
			if c := cmp.Compare(actives[n], actives[best]); c < 0 || (c == 0 && p.prefers(n, best)) {
				best = n
			}
		}
		p.active = best
		actives[best]++
		switch prev := p.req.Previous.Active; {
		case prev != "":
			p.reasons = append(p.reasons, fmt.Sprintf("active %s went away and no standby is eligible: %s takes over (fewest active VIPs)", prev, best))
		case len(p.req.Previous.Standbys) > 0:
			p.reasons = append(p.reasons, fmt.Sprintf("no active node and no standby is eligible: %s takes over (fewest active VIPs)", best))
		default:
			p.reasons = append(p.reasons, fmt.Sprintf("%s becomes active (fewest active VIPs)", best))
		}
	}

	out := make([]Result, len(states))
	for i, p := range states {
		out[i] = p.result()
	}
	return out, nil
}

// Assignments returns the assignments of results by VIP name, the form
// snapshot.Decisions takes.
func Assignments(results []Result) map[string]snapshot.Assignment {
	out := make(map[string]snapshot.Assignment, len(results))
	for _, r := range results {
		out[r.VIP] = r.Assignment
	}
	return out
}

// placement is one VIP being placed.
type placement struct {
	req      *Request
	l2       bool
	nodes    []string // eligible, sorted, unique
	eligible map[string]bool
	active   string
	reasons  []string
}

func newPlacement(r *Request) *placement {
	p := &placement{req: r, l2: r.Mode == v1alpha1.VIPModeL2ARP, eligible: map[string]bool{}}
	for _, n := range r.Eligible {
		if n != "" && !p.eligible[n] {
			p.eligible[n] = true
			p.nodes = append(p.nodes, n)
		}
	}
	slices.Sort(p.nodes)
	return p
}

// prefers reports whether the VIP ranks node a before node b: the higher
// rendezvous weight first, the name when weights tie.
func (p *placement) prefers(a, b string) bool {
	wa, wb := weight(p.req.VIP, a), weight(p.req.VIP, b)
	if wa != wb {
		return wa > wb
	}
	return a < b
}

func (p *placement) result() Result {
	r := Result{VIP: p.req.VIP, MinHealthyNodes: max(int(p.req.MinHealthyNodes), 1)}
	prev := p.req.Previous
	if p.l2 {
		r.Assignment = p.l2Assignment()
	} else if len(p.nodes) > 0 {
		r.Assignment.Announcing = slices.Clone(p.nodes)
		p.announceReasons()
	}
	r.Serving = len(p.nodes)
	r.Healthy = r.Serving >= r.MinHealthyNodes
	r.Changed = !equal(prev, r.Assignment)
	if !r.Changed {
		return r
	}
	if len(p.nodes) == 0 {
		gone := names(prev)
		if len(gone) > 0 {
			p.reasons = []string{fmt.Sprintf("no eligible node (%s went away): the VIP is not served", join(gone))}
		} else {
			p.reasons = []string{"no eligible node: the VIP is not served"}
		}
	}
	if len(p.reasons) == 0 {
		// Only a field the mode does not use changed, e.g. standbys left
		// over from before a switch from L2ARP to BGP.
		p.reasons = append(p.reasons, fmt.Sprintf("assignment rewritten for mode %s", p.req.Mode))
	}
	r.Reason = strings.Join(p.reasons, "; ")
	return r
}

// l2Assignment orders the standbys: the previous standbys still eligible,
// in their order, then newcomers by rendezvous weight.
func (p *placement) l2Assignment() snapshot.Assignment {
	if p.active == "" {
		return snapshot.Assignment{}
	}
	a := snapshot.Assignment{Active: p.active}
	seen := map[string]bool{p.active: true}
	var gone []string
	for _, s := range p.req.Previous.Standbys {
		switch {
		case seen[s]:
		case !p.eligible[s]:
			gone = append(gone, s)
		default:
			a.Standbys = append(a.Standbys, s)
		}
		seen[s] = true
	}
	var joined []string
	for _, n := range p.nodes {
		if !seen[n] {
			joined = append(joined, n)
		}
	}
	slices.SortFunc(joined, func(x, y string) int {
		switch {
		case x == y:
			return 0
		case p.prefers(x, y):
			return -1
		}
		return 1
	})
	a.Standbys = append(a.Standbys, joined...)
	if len(gone) > 0 {
		p.reasons = append(p.reasons, fmt.Sprintf("%s went away", plural("standby", "standbys", gone)))
	}
	if len(joined) > 0 {
		verb := "joins as standby"
		if len(joined) > 1 {
			verb = "join as standbys"
		}
		p.reasons = append(p.reasons, fmt.Sprintf("%s %s", join(joined), verb))
	}
	return a
}

// announceReasons says which nodes joined and left the announcing set.
func (p *placement) announceReasons() {
	before := map[string]bool{}
	for _, n := range p.req.Previous.Announcing {
		before[n] = true
	}
	var joined, gone []string
	for _, n := range p.nodes {
		if !before[n] {
			joined = append(joined, n)
		}
	}
	for _, n := range p.req.Previous.Announcing {
		if !p.eligible[n] && !slices.Contains(gone, n) {
			gone = append(gone, n)
		}
	}
	slices.Sort(gone)
	if len(joined) > 0 {
		p.reasons = append(p.reasons, fmt.Sprintf("%s now announcing", join(joined)))
	}
	if len(gone) > 0 {
		p.reasons = append(p.reasons, fmt.Sprintf("%s went away", join(gone)))
	}
}

func equal(a, b snapshot.Assignment) bool {
	return a.Active == b.Active && slices.Equal(a.Standbys, b.Standbys) && slices.Equal(a.Announcing, b.Announcing)
}

// names returns every node named in a, sorted, once each.
func names(a snapshot.Assignment) []string {
	var out []string
	if a.Active != "" {
		out = append(out, a.Active)
	}
	out = append(out, a.Standbys...)
	out = append(out, a.Announcing...)
	slices.Sort(out)
	return slices.Compact(out)
}

func join(nodes []string) string { return strings.Join(nodes, ", ") }

func plural(one, many string, nodes []string) string {
	if len(nodes) == 1 {
		return one + " " + nodes[0]
	}
	return many + " " + join(nodes)
}

// weight is the rendezvous weight of node for vip: FNV-1a over both names,
// finished with SplitMix64's mixer so that names differing in one
// character still get unrelated weights. Fixed arithmetic, so every
// replica and architecture agrees.
func weight(vip, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(vip))
	h.Write([]byte{0})
	h.Write([]byte(node))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
