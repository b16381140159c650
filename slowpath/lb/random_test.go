package lb

import (
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// within reports whether got is within tol (a fraction of n) of want.
func within(got, want, n int, tol float64) bool {
	d := float64(got - want)
	return d <= tol*float64(n) && -d <= tol*float64(n)
}

func plain(int) *Request { return &Request{Now: now} }

func TestRandomWeights(t *testing.T) {
	const n = 100_000
	tests := []struct {
		name    string
		weights []uint32
		down    []int
		want    []int // expected picks
	}{
		{"equal", []uint32{1, 1, 1, 1}, nil, []int{25000, 25000, 25000, 25000}},
		{"1,2,3,4", []uint32{1, 2, 3, 4}, nil, []int{10000, 20000, 30000, 40000}},
		{"1,2,3,4 with the 3 down", []uint32{1, 2, 3, 4}, []int{2}, []int{n / 7, 2 * n / 7, 0, 4 * n / 7}},
		{"large weights", []uint32{1 << 31, 1 << 30, 1 << 30}, nil, []int{50000, 25000, 25000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := newEPs(len(tc.weights))
			for _, i := range tc.down {
				eps[i].SetActiveHealthy(false)
			}
			b := mustNew(t, pb.LBPolicy_LB_POLICY_RANDOM, weighted(eps, tc.weights...), Options{Rand: seeded(7)})
			got := picks(t, b, n, plain)
			for i, ep := range eps {
				// 1% of n is more than 6 standard deviations here.
				if !within(got[ep], tc.want[i], n, 0.01) {
					t.Errorf("%s: %d picks, want %d ± 1%%", ep.Addr, got[ep], tc.want[i])
				}
			}
		})
	}
}

// TestP2CNeverPicksMoreLoaded loads endpoints 0, 1, 2, 3 with 0, 1, 2, 3
// requests: each pick sees a uniformly random pair and must take its less
// loaded member, so the shares are exactly 3/6, 2/6, 1/6 and 0.
func TestP2CNeverPicksMoreLoaded(t *testing.T) {
	const n = 60_000
	eps := newEPs(4)
	for i, ep := range eps {
		for range i {
			ep.Begin()
		}
	}
	b := mustNew(t, pb.LBPolicy_LB_POLICY_P2C, weighted(eps), Options{Rand: seeded(3)})
	got := picks(t, b, n, plain)
	for i, want := range []int{30000, 20000, 10000, 0} {
		if !within(got[eps[i]], want, n, 0.01) {
			t.Errorf("load %d: %d picks, want %d ± 1%%", i, got[eps[i]], want)
		}
	}
	if got[eps[3]] != 0 {
		t.Errorf("the most loaded endpoint was picked %d times; it loses every pair", got[eps[3]])
	}
}

func TestP2C(t *testing.T) {
	const n = 40_000
	tests := []struct {
		name    string
		weights []uint32
		load    []int
		want    []int
	}{
		{"equal load spreads", []uint32{1, 1, 1, 1}, []int{0, 0, 0, 0}, []int{10000, 10000, 10000, 10000}},
		{"one loaded is avoided", []uint32{1, 1, 1, 1}, []int{5, 0, 0, 0}, []int{0, n / 3, n / 3, n / 3}},
		{"idle pool follows weights", []uint32{1, 3}, []int{0, 0}, []int{10000, 30000}},
		// 2 in flight on weight 4 is less load than 1 on weight 1.
		{"load is relative to weight", []uint32{1, 4}, []int{1, 2}, []int{0, n}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := newEPs(len(tc.weights))
			for i, l := range tc.load {
				for range l {
					eps[i].Begin()
				}
			}
			b := mustNew(t, pb.LBPolicy_LB_POLICY_P2C, weighted(eps, tc.weights...), Options{Rand: seeded(4)})
			got := picks(t, b, n, plain)
			for i, ep := range eps {
				if !within(got[ep], tc.want[i], n, 0.015) {
					t.Errorf("%s: %d picks, want %d ± 1.5%%", ep.Addr, got[ep], tc.want[i])
				}
			}
		})
	}
}

func TestEWMAPrefersFast(t *testing.T) {
	const n = 60_000
	eps := newEPs(4)
	eps[0].ObserveLatency(time.Millisecond, now)
	for _, ep := range eps[1:] {
		ep.ObserveLatency(10*time.Millisecond, now)
	}
	b := mustNew(t, pb.LBPolicy_LB_POLICY_EWMA, weighted(eps), Options{Rand: seeded(5)})
	got := picks(t, b, n, plain)
	// The fast endpoint wins the 3 of 6 pairs it is in; each slow one wins
	// half of the 2 pairs of slow ones it is in.
	for i, want := range []int{n / 2, n / 6, n / 6, n / 6} {
		if !within(got[eps[i]], want, n, 0.015) {
			t.Errorf("%s: %d picks, want %d ± 1.5%%", eps[i].Addr, got[eps[i]], want)
		}
	}
}

func TestEWMA(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		latency  []time.Duration // 0: no observation
		peak     []time.Duration // observed a millisecond later; 0: none
		inflight []int
		want     []float64 // expected shares of picks
	}{
		{"equal latency spreads", []time.Duration{10 * ms, 10 * ms}, nil, nil, []float64{0.5, 0.5}},
		{"a peak is avoided at once", []time.Duration{10 * ms, 10 * ms}, []time.Duration{100 * ms, 0}, nil, []float64{0, 1}},
		{"a lower sample does not undo a peak at once", []time.Duration{100 * ms, 10 * ms}, []time.Duration{ms, 0}, nil, []float64{0, 1}},
		// Costs 1ms × (8+1) = 9ms against 10ms × 1.
		{"fast and busy still wins", []time.Duration{ms, 10 * ms}, nil, []int{8, 0}, []float64{1, 0}},
		// 1ms × (10+1) = 11ms against 10ms.
		{"in-flight load counts", []time.Duration{ms, 10 * ms}, nil, []int{10, 0}, []float64{0, 1}},
		{"unobserved takes the peer's latency: idle tie", []time.Duration{10 * ms, 0}, nil, nil, []float64{0.5, 0.5}},
		{"unobserved and idle beats a busy peer", []time.Duration{ms, 0}, nil, []int{1, 0}, []float64{0, 1}},
		{"nothing observed: by load", []time.Duration{0, 0}, nil, []int{0, 1}, []float64{1, 0}},
	}
	const n = 20_000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := newEPs(len(tc.latency))
			for i, ep := range eps {
				if tc.latency[i] > 0 {
					ep.ObserveLatency(tc.latency[i], now.Add(-time.Second))
				}
				if i < len(tc.peak) && tc.peak[i] > 0 {
					ep.ObserveLatency(tc.peak[i], now.Add(-time.Second+time.Millisecond))
				}
				if i < len(tc.inflight) {
					for range tc.inflight[i] {
						ep.Begin()
					}
				}
			}
			b := mustNew(t, pb.LBPolicy_LB_POLICY_EWMA, weighted(eps), Options{Rand: seeded(6)})
			got := picks(t, b, n, plain)
			for i, ep := range eps {
				if want := int(tc.want[i] * n); !within(got[ep], want, n, 0.02) {
					t.Errorf("%s: %d picks, want %d ± 2%%", ep.Addr, got[ep], want)
				}
			}
		})
	}
}

// TestEWMAInflightFeedback simulates requests that stay in flight: the
// fast endpoint takes requests until its load makes it as costly as the
// slow one, then they share.
func TestEWMAInflightFeedback(t *testing.T) {
	eps := newEPs(2)
	eps[0].ObserveLatency(time.Millisecond, now)
	eps[1].ObserveLatency(4*time.Millisecond, now)
	b := mustNew(t, pb.LBPolicy_LB_POLICY_EWMA, weighted(eps), Options{Rand: seeded(8)})
	got := map[*endpoint.Endpoint]int{}
	for range 50 {
		ep := b.Pick(&Request{Now: now})
		ep.Begin() // never ends
		got[ep]++
	}
	// Cost 1ms × (k+1) against 4ms × (j+1): the split settles at 4:1.
	if got[eps[0]] != 40 || got[eps[1]] != 10 {
		t.Fatalf("split %d/%d, want 40/10", got[eps[0]], got[eps[1]])
	}
}

// TestEWMAIdlePeakFades: an endpoint avoided after one slow answer is tried
// again once its peak has decayed below the busy endpoint's fresh latency,
// so a backend that recovered is not starved of the traffic that would
// show it.
func TestEWMAIdlePeakFades(t *testing.T) {
	eps := newEPs(2)
	eps[0].ObserveLatency(100*time.Millisecond, now)
	eps[1].ObserveLatency(10*time.Millisecond, now)
	b := mustNew(t, pb.LBPolicy_LB_POLICY_EWMA, weighted(eps), Options{Rand: seeded(1)})
	if got := b.Pick(&Request{Now: now.Add(time.Second)}); got != eps[1] {
		t.Fatalf("right after the slow answer: picked %s, want the fast one", got.Addr)
	}
	later := now.Add(5 * time.Minute)
	eps[1].ObserveLatency(10*time.Millisecond, later) // the busy one keeps answering
	if got := b.Pick(&Request{Now: later}); got != eps[0] {
		t.Fatalf("five idle minutes later: picked %s, want the formerly slow one", got.Addr)
	}
}
