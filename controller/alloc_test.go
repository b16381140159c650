package controller

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/ipam"
)

func mustPool(t *testing.T, name string, auto bool, cidrs ...string) *ipam.Pool {
	t.Helper()
	p := &ipam.Pool{Name: name, AutoAssign: auto}
	for _, c := range cidrs {
		r, err := ipam.ParseCIDR(c)
		if err != nil {
			t.Fatal(err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	return p
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestAllocate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pools := func(t *testing.T) []*ipam.Pool {
		return []*ipam.Pool{
			mustPool(t, "a", true, "10.0.0.0/30"),
			mustPool(t, "b", false, "10.0.1.0/31", "2001:db8::/127"),
		}
	}
	tests := []struct {
		name     string
		static   []string
		claims   []claim
		want     map[string][]string
		problems map[string]string // vip → substring of its problems
	}{
		{
			name:   "oldest first, static addresses skipped",
			static: []string{"10.0.0.0"},
			claims: []claim{
				{vip: "new", families: []int{4}, created: t0.Add(time.Hour)},
				{vip: "old", families: []int{4}, created: t0},
			},
			want: map[string][]string{"old": {"10.0.0.1"}, "new": {"10.0.0.2"}},
		},
		{
			name: "held addresses are kept, also by younger claims",
			claims: []claim{
				{vip: "old", families: []int{4}, created: t0},
				{vip: "young", families: []int{4}, created: t0.Add(time.Hour), current: addrs("10.0.0.0")},
			},
			want: map[string][]string{"old": {"10.0.0.1"}, "young": {"10.0.0.0"}},
		},
		{
			name: "named pool, dual stack",
			claims: []claim{
				{vip: "v", pool: "b", families: []int{4, 6}, field: "spec.poolRef"},
			},
			want: map[string][]string{"v": {"10.0.1.0", "2001:db8::"}},
		},
		{
			name: "a pool without autoAssign is not used unless named",
			claims: []claim{
				{vip: "v1", families: []int{6}, field: "spec"},
			},
			want:     map[string][]string{"v1": nil},
			problems: map[string]string{"v1": "no ProxyIPPool with autoAssign has a free IPv6 address"},
		},
		{
			name: "exhaustion names the pool",
			claims: []claim{
				{vip: "v1", pool: "b", families: []int{4}, created: t0},
				{vip: "v2", pool: "b", families: []int{4}, created: t0.Add(1)},
				{vip: "v3", pool: "b", families: []int{4}, created: t0.Add(2), field: "spec.poolRef"},
			},
			want:     map[string][]string{"v1": {"10.0.1.0"}, "v2": {"10.0.1.1"}, "v3": nil},
			problems: map[string]string{"v3": "spec.poolRef: ProxyIPPool b has no free IPv4 address"},
		},
		{
			name: "missing pool",
			claims: []claim{
				{vip: "v", pool: "nope", families: []int{4}, field: "spec.poolRef.name"},
			},
			want:     map[string][]string{"v": nil},
			problems: map[string]string{"v": `ProxyIPPool "nope" does not exist`},
		},
		{
			name: "requested address outside the named pool",
			claims: []claim{
				{vip: "s", pool: "a", requested: addrs("10.0.1.1"), families: []int{4}, field: "metadata.annotations[novaedge.io/loadBalancerIPs]"},
			},
			want:     map[string][]string{"s": nil},
			problems: map[string]string{"s": "address 10.0.1.1 is outside ProxyIPPool a (it belongs to b)"},
		},
		{
			name: "requested address in no pool",
			claims: []claim{
				{vip: "s", requested: addrs("192.0.2.1"), families: []int{4}, field: "spec.loadBalancerIP"},
			},
			want:     map[string][]string{"s": nil},
			problems: map[string]string{"s": "spec.loadBalancerIP: address 192.0.2.1 is in no ProxyIPPool"},
		},
		{
			name: "requested address taken",
			claims: []claim{
				{vip: "first", requested: addrs("10.0.0.3"), families: []int{4}, created: t0, owner: "Service/x/first"},
				{vip: "second", requested: addrs("10.0.0.3"), families: []int{4}, created: t0.Add(1), field: "spec.loadBalancerIP"},
			},
			want:     map[string][]string{"first": {"10.0.0.3"}, "second": nil},
			problems: map[string]string{"second": "already held by Service/x/first"},
		},
		{
			name: "a held address outside every pool is released and replaced",
			claims: []claim{
				{vip: "v", families: []int{4}, current: addrs("192.0.2.7")},
			},
			want:     map[string][]string{"v": {"10.0.0.0"}},
			problems: map[string]string{"v": "address 192.0.2.7 is in no usable ProxyIPPool any more; released"},
		},
		{
			name: "a held address of another pool than the one named is released",
			claims: []claim{
				{vip: "v", pool: "b", families: []int{4}, current: addrs("10.0.0.1")},
			},
			want:     map[string][]string{"v": {"10.0.1.0"}},
			problems: map[string]string{"v": "belongs to ProxyIPPool a, not to the requested b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allocate(pools(t), addrs(tt.static...), tt.claims)
			for vip, want := range tt.want {
				r := got[vip]
				if r == nil {
					t.Fatalf("no allocation for %s", vip)
				}
				var s []string
				for _, a := range r.addrs {
					s = append(s, a.String())
				}
				if !slices.Equal(s, want) {
					t.Errorf("%s: addresses %v, want %v", vip, s, want)
				}
				p := strings.Join(r.problems, "; ")
				if w := tt.problems[vip]; (w == "") != (p == "") || !strings.Contains(p, w) {
					t.Errorf("%s: problems %q, want %q", vip, p, w)
				}
			}
		})
	}
}

// TestAllocateStable: allocating again from its own result changes nothing,
// whatever the order claims come in (a restart, or another leader).
func TestAllocateStable(t *testing.T) {
	pools := []*ipam.Pool{mustPool(t, "a", true, "10.0.0.0/28")}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var claims []claim
	for i := range 12 {
		claims = append(claims, claim{vip: string(rune('a' + i)), families: []int{4}, created: t0.Add(time.Duration(i%3) * time.Minute)})
	}
	first := allocate(pools, nil, claims)
	for i := range claims {
		claims[i].current = first[claims[i].vip].addrs
	}
	slices.Reverse(claims)
	// A new claim arrives, older than all others: it must not take anything.
	claims = append(claims, claim{vip: "zz", families: []int{4}, created: t0.Add(-time.Hour)})
	second := allocate(pools, nil, claims)
	for vip, r := range first {
		if !slices.Equal(r.addrs, second[vip].addrs) {
			t.Errorf("%s moved: %v → %v", vip, r.addrs, second[vip].addrs)
		}
	}
	if got := second["zz"].addrs; len(got) != 1 || slices.ContainsFunc(claims[:12], func(c claim) bool { return slices.Contains(c.current, got[0]) }) {
		t.Errorf("new claim got %v, want one free address", got)
	}
}
