package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/snapshot"
)

const (
	l2   = v1alpha1.VIPModeL2ARP
	bgp  = v1alpha1.VIPModeBGP
	ospf = v1alpha1.VIPModeOSPF
	lcl  = v1alpha1.VIPModeLocal
)

func asg(active string, standbys ...string) snapshot.Assignment {
	return snapshot.Assignment{Active: active, Standbys: standbys}
}

func ann(nodes ...string) snapshot.Assignment { return snapshot.Assignment{Announcing: nodes} }

// byWeight orders nodes as the VIP's rendezvous weights rank them.
func byWeight(vip string, nodes ...string) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		if weight(vip, a) > weight(vip, b) {
			return -1
		}
		return 1
	})
	return out
}

func scheduleOne(t *testing.T, r Request) Result {
	t.Helper()
	res, err := Schedule([]Request{r})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].VIP != r.VIP {
		t.Fatalf("results %+v, want one for %s", res, r.VIP)
	}
	return res[0]
}

func TestScheduleOneVIP(t *testing.T) {
	fresh := byWeight("fresh", "a", "b", "c")
	tests := []struct {
		name string
		req  Request
		want Result
	}{
		{
			name: "new L2ARP VIP: highest weight active, the rest by weight",
			req:  Request{Mode: l2, Eligible: []string{"c", "a", "b"}},
			want: Result{Assignment: asg(fresh[0], fresh[1:]...), Changed: true, Serving: 3, Healthy: true,
				Reason: fmt.Sprintf("%s becomes active (fewest active VIPs); %s, %s join as standbys", fresh[0], fresh[1], fresh[2])},
		},
		{
			name: "unchanged",
			req:  Request{Mode: l2, Eligible: []string{"a", "b", "c"}, Previous: asg("a", "b", "c")},
			want: Result{Assignment: asg("a", "b", "c"), Serving: 3, Healthy: true},
		},
		{
			name: "sticky: the active stays whatever its weight, standby order kept",
			req:  Request{Mode: l2, Eligible: []string{"a", "b", "c"}, Previous: asg("c", "b", "a")},
			want: Result{Assignment: asg("c", "b", "a"), Serving: 3, Healthy: true},
		},
		{
			name: "active leaves: the first standby takes over",
			req:  Request{Mode: l2, Eligible: []string{"b", "c"}, Previous: asg("a", "b", "c")},
			want: Result{Assignment: asg("b", "c"), Changed: true, Serving: 2, Healthy: true,
				Reason: "active a went away: b (first standby) takes over"},
		},
		{
			name: "active and first standby leave: the next standby takes over",
			req:  Request{Mode: l2, Eligible: []string{"c", "d"}, Previous: asg("a", "b", "c", "d")},
			want: Result{Assignment: asg("c", "d"), Changed: true, Serving: 2, Healthy: true,
				Reason: "active a went away: c (first standby) takes over; standby b went away"},
		},
		{
			name: "a returning node does not take the active role back",
			req:  Request{Mode: l2, Eligible: []string{"a", "b", "c"}, Previous: asg("b", "c")},
			want: Result{Assignment: asg("b", "c", "a"), Changed: true, Serving: 3, Healthy: true,
				Reason: "a joins as standby"},
		},
		{
			name: "a standby leaves",
			req:  Request{Mode: l2, Eligible: []string{"a", "c"}, Previous: asg("a", "b", "c")},
			want: Result{Assignment: asg("a", "c"), Changed: true, Serving: 2, Healthy: true,
				Reason: "standby b went away"},
		},
		{
			name: "no standby eligible: a new node takes over",
			req:  Request{Mode: l2, Eligible: []string{"d"}, Previous: asg("a", "b")},
			want: Result{Assignment: asg("d"), Changed: true, Serving: 1, Healthy: true,
				Reason: "active a went away and no standby is eligible: d takes over (fewest active VIPs); standby b went away"},
		},
		{
			name: "every node gone: nobody serves, minHealthyNodes unmet",
			req:  Request{Mode: l2, Previous: asg("a", "b")},
			want: Result{Changed: true, Healthy: false,
				Reason: "no eligible node (a, b went away): the VIP is not served"},
		},
		{
			name: "still no node",
			req:  Request{Mode: l2},
			want: Result{Healthy: false},
		},
		{
			name: "minHealthyNodes above the eligible count",
			req:  Request{Mode: l2, Eligible: []string{"a", "b", "c"}, Previous: asg("a", "b", "c"), MinHealthyNodes: 4},
			want: Result{Assignment: asg("a", "b", "c"), Serving: 3, MinHealthyNodes: 4, Healthy: false},
		},
		{
			name: "minHealthyNodes met exactly",
			req:  Request{Mode: l2, Eligible: []string{"a", "b"}, Previous: asg("a", "b"), MinHealthyNodes: 2},
			want: Result{Assignment: asg("a", "b"), Serving: 2, MinHealthyNodes: 2, Healthy: true},
		},
		{
			name: "junk in the inputs: duplicates, empty names, the active among its standbys",
			req:  Request{Mode: l2, Eligible: []string{"c", "a", "", "a", "b"}, Previous: asg("a", "a", "b", "b")},
			want: Result{Assignment: asg("a", "b", "c"), Changed: true, Serving: 3, Healthy: true,
				Reason: "c joins as standby"},
		},
		{
			name: "no active but standbys (all had gone, one came back)",
			req:  Request{Mode: l2, Eligible: []string{"b"}, Previous: asg("", "a", "b")},
			want: Result{Assignment: asg("b"), Changed: true, Serving: 1, Healthy: true,
				Reason: "no active node: b (first standby) takes over; standby a went away"},
		},
		{
			name: "BGP: every eligible node announces, sorted",
			req:  Request{Mode: bgp, Eligible: []string{"c", "b"}, Previous: ann("a", "b")},
			want: Result{Assignment: ann("b", "c"), Changed: true, Serving: 2, Healthy: true,
				Reason: "c now announcing; a went away"},
		},
		{
			name: "BGP unchanged",
			req:  Request{Mode: bgp, Eligible: []string{"b", "a"}, Previous: ann("a", "b")},
			want: Result{Assignment: ann("a", "b"), Serving: 2, Healthy: true},
		},
		{
			name: "OSPF: all nodes gone",
			req:  Request{Mode: ospf, Previous: ann("a"), MinHealthyNodes: 1},
			want: Result{Changed: true, Healthy: false, Reason: "no eligible node (a went away): the VIP is not served"},
		},
		{
			name: "Local: every eligible node binds it, in Announcing",
			req:  Request{Mode: lcl, Eligible: []string{"b", "a"}},
			want: Result{Assignment: ann("a", "b"), Changed: true, Serving: 2, Healthy: true, Reason: "a, b now announcing"},
		},
		{
			name: "mode switch from L2ARP to BGP",
			req:  Request{Mode: bgp, Eligible: []string{"a", "b"}, Previous: asg("a", "b")},
			want: Result{Assignment: ann("a", "b"), Changed: true, Serving: 2, Healthy: true, Reason: "a, b now announcing"},
		},
		{
			name: "mode switch from BGP to L2ARP: the highest weight becomes active",
			req:  Request{Mode: l2, Eligible: []string{"a", "b", "c"}, Previous: ann("a", "b", "c")},
			want: Result{Assignment: asg(byWeight("switch", "a", "b", "c")[0], byWeight("switch", "a", "b", "c")[1:]...), Changed: true, Serving: 3, Healthy: true,
				Reason: fmt.Sprintf("%s becomes active (fewest active VIPs); %s join as standbys", byWeight("switch", "a", "b", "c")[0], join(byWeight("switch", "a", "b", "c")[1:]))},
		},
		{
			name: "stale announcing list on an L2ARP VIP is cleared",
			req:  Request{Mode: l2, Eligible: []string{"a"}, Previous: snapshot.Assignment{Active: "a", Announcing: []string{"a"}}},
			want: Result{Assignment: asg("a"), Changed: true, Serving: 1, Healthy: true, Reason: "assignment rewritten for mode L2ARP"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.VIP = "vip"
			if tc.name == "new L2ARP VIP: highest weight active, the rest by weight" {
				tc.req.VIP = "fresh"
			}
			if tc.name == "mode switch from BGP to L2ARP: the highest weight becomes active" {
				tc.req.VIP = "switch"
			}
			tc.want.VIP = tc.req.VIP
			tc.want.MinHealthyNodes = max(tc.want.MinHealthyNodes, 1)
			got := scheduleOne(t, tc.req)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%c", 'a'+i)
	}
	return out
}

func l2Requests(n int, eligible []string) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{VIP: fmt.Sprintf("vip-%03d", i), Mode: l2, Eligible: eligible}
	}
	return reqs
}

func activeCounts(res []Result) map[string]int {
	out := map[string]int{}
	for _, r := range res {
		if r.Assignment.Active != "" {
			out[r.Assignment.Active]++
		}
	}
	return out
}

// carry turns results into the next round's previous assignments.
func carry(reqs []Request, res []Result, eligible []string) []Request {
	prev := Assignments(res)
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Previous = prev[out[i].VIP]
		out[i].Eligible = eligible
	}
	return out
}

// New VIPs go to the node with the fewest actives, so a fresh layout is as
// even as the numbers allow, and a node that joins takes the new VIPs
// until it catches up.
func TestScheduleBalancesNewVIPs(t *testing.T) {
	tests := []struct {
		name  string
		vips  int
		nodes int
		want  []int // sorted counts of actives per node
	}{
		{name: "100 on 4", vips: 100, nodes: 4, want: []int{25, 25, 25, 25}},
		{name: "101 on 4", vips: 101, nodes: 4, want: []int{25, 25, 25, 26}},
		{name: "7 on 3", vips: 7, nodes: 3, want: []int{2, 2, 3}},
		{name: "2 on 5", vips: 2, nodes: 5, want: []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Schedule(l2Requests(tc.vips, nodes(tc.nodes)))
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, n := range activeCounts(res) {
				got = append(got, n)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("actives per node %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("a joining node takes new VIPs until it catches up", func(t *testing.T) {
		reqs := l2Requests(100, nodes(4))
		res, err := Schedule(reqs)
		if err != nil {
			t.Fatal(err)
		}
		five := nodes(5)
		next := carry(reqs, res, five)
		next = append(next, l2Requests(130, five)[100:]...) // 30 new VIPs
		res2, err := Schedule(next)
		if err != nil {
			t.Fatal(err)
		}
		// The first 25 new VIPs (by name) bring node-e level with the
		// others; the last 5 then spread one per node.
		want := map[string]int{"node-a": 26, "node-b": 26, "node-c": 26, "node-d": 26, "node-e": 26}
		if diff := cmp.Diff(want, activeCounts(res2)); diff != "" {
			t.Errorf("actives per node (-want +got):\n%s", diff)
		}
		for i, r := range res2[:100] {
			if r.Assignment.Active != res[i].Assignment.Active {
				t.Errorf("%s moved from %s to %s without a reason", r.VIP, res[i].Assignment.Active, r.Assignment.Active)
			}
			if last := r.Assignment.Standbys[len(r.Assignment.Standbys)-1]; last != "node-e" {
				t.Errorf("%s: the joining node must be appended to the standbys, got %v", r.VIP, r.Assignment.Standbys)
			}
		}
		for _, r := range res2[100:125] {
			if r.Assignment.Active != "node-e" {
				t.Errorf("%s: active %s, want node-e (fewest actives)", r.VIP, r.Assignment.Active)
			}
		}
	})
}

// When a node fails, each of its VIPs goes to its own first standby: the
// rendezvous order differs per VIP, so the load spreads over the survivors
// instead of landing on one node. When it returns it takes nothing back.
func TestScheduleFailoverAndReturn(t *testing.T) {
	all := nodes(4)
	reqs := l2Requests(100, all)
	res, err := Schedule(reqs)
	if err != nil {
		t.Fatal(err)
	}
	survivors := all[1:]
	res2, err := Schedule(carry(reqs, res, survivors))
	if err != nil {
		t.Fatal(err)
	}
	took := map[string]int{}
	for i, r := range res2 {
		before := res[i].Assignment
		switch {
		case before.Active != "node-a":
			if r.Assignment.Active != before.Active || !r.Changed || r.Reason != "standby node-a went away" {
				t.Errorf("%s: %+v, want active %s kept and only node-a dropped from the standbys", r.VIP, r, before.Active)
			}
		default:
			if r.Assignment.Active != before.Standbys[0] {
				t.Errorf("%s: active %s, want the first standby %s", r.VIP, r.Assignment.Active, before.Standbys[0])
			}
			if !slices.Equal(r.Assignment.Standbys, before.Standbys[1:]) {
				t.Errorf("%s: standbys %v, want %v", r.VIP, r.Assignment.Standbys, before.Standbys[1:])
			}
			took[r.Assignment.Active]++
		}
	}
	if len(took) != len(survivors) {
		t.Errorf("node-a's VIPs went to %v; rendezvous ordering should spread them over all %d survivors", took, len(survivors))
	}

	res3, err := Schedule(carry(reqs, res2, all))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res3 {
		if r.Assignment.Active != res2[i].Assignment.Active {
			t.Errorf("%s: returning node-a moved the active from %s to %s", r.VIP, res2[i].Assignment.Active, r.Assignment.Active)
		}
		if want := append(slices.Clone(res2[i].Assignment.Standbys), "node-a"); !slices.Equal(r.Assignment.Standbys, want) {
			t.Errorf("%s: standbys %v, want %v", r.VIP, r.Assignment.Standbys, want)
		}
		if r.Reason != "node-a joins as standby" {
			t.Errorf("%s: reason %q", r.VIP, r.Reason)
		}
	}
	if activeCounts(res3)["node-a"] != 0 {
		t.Errorf("node-a took actives back: %v", activeCounts(res3))
	}
}

func TestScheduleErrors(t *testing.T) {
	tests := []struct {
		name string
		reqs []Request
	}{
		{name: "empty name", reqs: []Request{{Mode: l2}}},
		{name: "duplicate", reqs: []Request{{VIP: "x", Mode: l2}, {VIP: "y", Mode: bgp}, {VIP: "x", Mode: bgp}}},
		{name: "unknown mode", reqs: []Request{{VIP: "x", Mode: "ECMP"}}},
		{name: "no mode", reqs: []Request{{VIP: "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Schedule(tc.reqs)
			if !errors.Is(err, ErrInvalidRequest) || res != nil {
				t.Errorf("Schedule = %v, %v; want ErrInvalidRequest", res, err)
			}
		})
	}
}

// randomRequests makes VIPs of every mode over a random subset of nodes,
// with previous assignments that may name any node, repeat names, or list
// the active among the standbys.
func randomRequests(r *rand.Rand) []Request {
	pool := nodes(1 + r.IntN(7))
	pick := func(max int) []string {
		var out []string
		for range r.IntN(max + 1) {
			out = append(out, pool[r.IntN(len(pool))])
		}
		return out
	}
	modes := []v1alpha1.VIPMode{l2, l2, l2, bgp, ospf, lcl}
	reqs := make([]Request, 1+r.IntN(20))
	for i := range reqs {
		req := Request{VIP: fmt.Sprintf("v%d", i), Mode: modes[r.IntN(len(modes))], Eligible: pick(len(pool) + 2), MinHealthyNodes: int32(r.IntN(4))}
		if r.IntN(4) > 0 {
			prev := pick(len(pool) + 1)
			if len(prev) > 0 && r.IntN(2) == 0 {
				req.Previous.Active, req.Previous.Standbys = prev[0], prev[1:]
			} else {
				req.Previous.Announcing = prev
			}
		}
		reqs[i] = req
	}
	return reqs
}

// Properties over random inputs: the active is always eligible; the
// standbys are exactly the other eligible nodes, without duplicates; the
// announcing list is the sorted eligible set; a still-eligible active
// stays; a lost active is replaced by its first eligible standby; and the
// result does not depend on the order of the requests or node lists.
func TestScheduleProperties(t *testing.T) {
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		reqs := randomRequests(r)
		res, err := Schedule(reqs)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		byVIP := map[string]Result{}
		for _, x := range res {
			byVIP[x.VIP] = x
		}
		for _, req := range reqs {
			got := byVIP[req.VIP]
			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf("seed %d, %s (%s, eligible %v, previous %+v): %s; got %+v", seed, req.VIP, req.Mode, req.Eligible, req.Previous, fmt.Sprintf(format, args...), got)
			}
			var eligible []string
			for _, n := range req.Eligible {
				if !slices.Contains(eligible, n) {
					eligible = append(eligible, n)
				}
			}
			slices.Sort(eligible)
			a := got.Assignment
			if got.Serving != len(eligible) || got.Healthy != (len(eligible) >= max(int(req.MinHealthyNodes), 1)) {
				fail("serving %d / healthy %v wrong for %d eligible", got.Serving, got.Healthy, len(eligible))
			}
			if got.Changed != (got.Reason != "") {
				fail("changed %v with reason %q", got.Changed, got.Reason)
			}
			if req.Mode != l2 {
				if a.Active != "" || len(a.Standbys) > 0 || !slices.Equal(a.Announcing, eligible) {
					fail("want announcing = %v only", eligible)
				}
				continue
			}
			if len(a.Announcing) > 0 {
				fail("L2ARP VIP with announcing nodes")
			}
			if len(eligible) == 0 {
				if a.Active != "" || len(a.Standbys) > 0 {
					fail("nodes assigned with none eligible")
				}
				continue
			}
			if !slices.Contains(eligible, a.Active) {
				fail("active %q is not eligible", a.Active)
			}
			if slices.Contains(a.Standbys, a.Active) {
				fail("active among the standbys")
			}
			all := append([]string{a.Active}, a.Standbys...)
			slices.Sort(all)
			if !slices.Equal(all, eligible) {
				fail("active + standbys %v are not the eligible nodes %v (once each)", all, eligible)
			}
			if slices.Contains(eligible, req.Previous.Active) && a.Active != req.Previous.Active {
				fail("eligible active %s was replaced", req.Previous.Active)
			}
			if !slices.Contains(eligible, req.Previous.Active) {
				for _, s := range req.Previous.Standbys {
					if slices.Contains(eligible, s) {
						if a.Active != s {
							fail("active %s, want the first eligible standby %s", a.Active, s)
						}
						break
					}
				}
			}
		}

		// Shuffle the requests and their node lists: same results.
		shuffled := slices.Clone(reqs)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for i := range shuffled {
			e := slices.Clone(shuffled[i].Eligible)
			r.Shuffle(len(e), func(i, j int) { e[i], e[j] = e[j], e[i] })
			shuffled[i].Eligible = e
		}
		res2, err := Schedule(shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res, res2); diff != "" {
			t.Fatalf("seed %d: order of the input changed the result:\n%s", seed, diff)
		}
	}
}

// Schedule must not modify its input.
func TestScheduleDoesNotModifyInput(t *testing.T) {
	reqs := []Request{
		{VIP: "b", Mode: l2, Eligible: []string{"z", "y", "x"}, Previous: asg("q", "z", "x")},
		{VIP: "a", Mode: bgp, Eligible: []string{"y", "x"}},
	}
	before := []Request{
		{VIP: "b", Mode: l2, Eligible: []string{"z", "y", "x"}, Previous: asg("q", "z", "x")},
		{VIP: "a", Mode: bgp, Eligible: []string{"y", "x"}},
	}
	if _, err := Schedule(reqs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, reqs); diff != "" {
		t.Errorf("input modified (-before +after):\n%s", diff)
	}
}

// The weights are fixed arithmetic: pinned values (computed apart from
// this code, FNV-1a 64 then SplitMix64's finaliser) guard against a change
// that would reorder every VIP's standbys on upgrade, when replicas of two
// versions must agree.
func TestWeightPinned(t *testing.T) {
	got := []uint64{weight("vip", "node-a"), weight("vip", "node-b"), weight("", "")}
	want := []uint64{0x3d879cecc4bfc80e, 0x8b00b29b8f42a7be, 0x25fc6dd36ce04b20}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}
