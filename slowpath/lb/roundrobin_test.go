package lb

import (
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// sequence picks n times and names each pick by its index letter.
func sequence(t *testing.T, b Balancer, eps []*endpoint.Endpoint, n int, req *Request) string {
	t.Helper()
	var sb strings.Builder
	for range n {
		ep := b.Pick(req)
		for i, e := range eps {
			if e == ep {
				sb.WriteByte(byte('a' + i))
			}
		}
	}
	return sb.String()
}

func TestRoundRobinSmooth(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint32
		down    []int
		tried   []int
		want    string
	}{
		// nginx's documented smooth sequence for weights 5, 1, 1.
		{"5,1,1", []uint32{5, 1, 1}, nil, nil, strings.Repeat("aabacaa", 3)},
		{"equal weights", []uint32{1, 1, 1}, nil, nil, "abcabcabc"},
		{"2,1", []uint32{2, 1}, nil, nil, "abaaba"},
		{"5,1,1 with b unavailable", []uint32{5, 1, 1}, []int{1}, nil, strings.Repeat("aaacaa", 2)},
		{"5,1,1 with a tried", []uint32{5, 1, 1}, nil, []int{0}, "bcbcbc"},
		{"5,1,1 all tried", []uint32{5, 1, 1}, nil, []int{0, 1, 2}, strings.Repeat("aabacaa", 2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := newEPs(len(tc.weights))
			for _, i := range tc.down {
				eps[i].SetActiveHealthy(false)
			}
			tried := map[*endpoint.Endpoint]bool{}
			for _, i := range tc.tried {
				tried[eps[i]] = true
			}
			// Panic threshold 0: one of three down must not trigger it.
			b := mustNew(t, pb.LBPolicy_LB_POLICY_ROUND_ROBIN, weighted(eps, tc.weights...), Options{})
			req := &Request{Now: now, Tried: func(ep *endpoint.Endpoint) bool { return tried[ep] }}
			if got := sequence(t, b, eps, len(tc.want), req); got != tc.want {
				t.Fatalf("sequence %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRoundRobinRecovery checks that an endpoint coming back joins the
// rotation with its full share.
func TestRoundRobinRecovery(t *testing.T) {
	eps := newEPs(3)
	b := mustNew(t, pb.LBPolicy_LB_POLICY_UNSPECIFIED, weighted(eps, 5, 1, 1), Options{})
	req := &Request{Now: now}
	eps[2].SetActiveHealthy(false)
	if got := sequence(t, b, eps, 12, req); strings.Contains(got, "c") {
		t.Fatalf("unavailable c picked: %q", got)
	}
	eps[2].SetActiveHealthy(true)
	got := sequence(t, b, eps, 70, req)
	for i, want := range []int{50, 10, 10} {
		if n := strings.Count(got, string(rune('a'+i))); n != want {
			t.Errorf("after recovery %c picked %d of 70 times, want %d (%q)", 'a'+i, n, want, got)
		}
	}
}
