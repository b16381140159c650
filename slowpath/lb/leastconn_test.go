package lb

import (
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestLeastConn(t *testing.T) {
	const n = 20_000
	tests := []struct {
		name    string
		weights []uint32
		load    []int
		want    []float64 // expected shares
	}{
		{"fewest in flight", []uint32{1, 1, 1}, []int{3, 1, 2}, []float64{0, 1, 0}},
		// 3/4 < 1/1.
		{"relative to weight", []uint32{1, 4}, []int{1, 3}, []float64{0, 1}},
		// 4/4 == 1/1: a tie, broken by weight.
		{"relative tie", []uint32{1, 4}, []int{1, 4}, []float64{0.2, 0.8}},
		{"idle ties spread, not the first", []uint32{1, 1, 1, 1}, []int{0, 0, 0, 0}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"idle ties follow weights", []uint32{1, 3}, []int{0, 0}, []float64{0.25, 0.75}},
		{"ties among the least loaded only", []uint32{1, 1, 1}, []int{0, 1, 0}, []float64{0.5, 0, 0.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := newEPs(len(tc.weights))
			for i, l := range tc.load {
				for range l {
					eps[i].Begin()
				}
			}
			b := mustNew(t, pb.LBPolicy_LB_POLICY_LEAST_CONN, weighted(eps, tc.weights...), Options{Rand: seeded(9)})
			got := picks(t, b, n, plain)
			for i, ep := range eps {
				if want := int(tc.want[i] * n); !within(got[ep], want, n, 0.015) {
					t.Errorf("%s: %d picks, want %d ± 1.5%%", ep.Addr, got[ep], want)
				}
			}
		})
	}
}

// TestLeastConnKeepsLoadProportional picks without ever ending a request:
// each endpoint's load must stay within one request of its weight's share.
func TestLeastConnKeepsLoadProportional(t *testing.T) {
	weights := []uint32{1, 2, 5}
	eps := newEPs(len(weights))
	b := mustNew(t, pb.LBPolicy_LB_POLICY_LEAST_CONN, weighted(eps, weights...), Options{Rand: seeded(10)})
	for k := 1; k <= 800; k++ {
		b.Pick(&Request{Now: now}).Begin()
		for i, ep := range eps {
			ideal := float64(k) * float64(weights[i]) / 8
			if d := float64(ep.Inflight()) - ideal; d > 1 || d < -float64(weights[i]) {
				t.Fatalf("after %d picks %s has %d in flight, ideal %.2f", k, ep.Addr, ep.Inflight(), ideal)
			}
		}
	}
}
