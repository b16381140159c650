package lb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// now is the fixed clock of every test.
var now = time.Unix(1_000_000, 0)

var allPolicies = []pb.LBPolicy{
	pb.LBPolicy_LB_POLICY_ROUND_ROBIN,
	pb.LBPolicy_LB_POLICY_RANDOM,
	pb.LBPolicy_LB_POLICY_P2C,
	pb.LBPolicy_LB_POLICY_EWMA,
	pb.LBPolicy_LB_POLICY_LEAST_CONN,
	pb.LBPolicy_LB_POLICY_RING_HASH,
	pb.LBPolicy_LB_POLICY_MAGLEV,
}

func policyName(p pb.LBPolicy) string {
	return map[pb.LBPolicy]string{
		pb.LBPolicy_LB_POLICY_ROUND_ROBIN: "RoundRobin",
		pb.LBPolicy_LB_POLICY_RANDOM:      "Random",
		pb.LBPolicy_LB_POLICY_P2C:         "P2C",
		pb.LBPolicy_LB_POLICY_EWMA:        "EWMA",
		pb.LBPolicy_LB_POLICY_LEAST_CONN:  "LeastConn",
		pb.LBPolicy_LB_POLICY_RING_HASH:   "RingHash",
		pb.LBPolicy_LB_POLICY_MAGLEV:      "Maglev",
	}[p]
}

func newEPs(n int) []*endpoint.Endpoint {
	eps := make([]*endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = endpoint.New(fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256))
	}
	return eps
}

// weighted pairs eps with weights; a missing weight is 1.
func weighted(eps []*endpoint.Endpoint, weights ...uint32) []Target {
	ts := make([]Target, len(eps))
	for i, ep := range eps {
		ts[i] = Target{EP: ep, Weight: 1}
		if i < len(weights) {
			ts[i].Weight = weights[i]
		}
	}
	return ts
}

// seeded returns a deterministic random source.
func seeded(seed uint64) func() uint64 {
	return rand.New(rand.NewPCG(seed, seed^0x5eed)).Uint64
}

func mustNew(t testing.TB, policy pb.LBPolicy, ts []Target, opts Options) Balancer {
	t.Helper()
	b, err := New(policy, ts, opts)
	if err != nil {
		t.Fatalf("New(%s): %v", policyName(policy), err)
	}
	return b
}

// keyReq returns the i-th request of a run: keyed for hash policies.
func keyReq(i int) *Request {
	return &Request{Now: now, Hash: HashString(fmt.Sprintf("key-%d", i)), HasHash: true}
}

// picks counts n picks per endpoint.
func picks(t testing.TB, b Balancer, n int, req func(int) *Request) map[*endpoint.Endpoint]int {
	t.Helper()
	got := map[*endpoint.Endpoint]int{}
	for i := range n {
		ep := b.Pick(req(i))
		if ep == nil {
			t.Fatalf("pick %d: nil", i)
		}
		got[ep]++
	}
	return got
}

func TestNewValidation(t *testing.T) {
	eps := newEPs(3)
	dup := endpoint.New(eps[0].Addr)
	tests := []struct {
		name    string
		policy  pb.LBPolicy
		targets []Target
		opts    Options
		want    error
	}{
		{"unspecified is round robin", pb.LBPolicy_LB_POLICY_UNSPECIFIED, weighted(eps), Options{}, nil},
		{"no targets", pb.LBPolicy_LB_POLICY_MAGLEV, nil, Options{}, nil},
		{"unknown policy", pb.LBPolicy(99), weighted(eps), Options{}, ErrUnknownPolicy},
		{"zero weight", pb.LBPolicy_LB_POLICY_RANDOM, weighted(eps, 1, 0, 1), Options{}, ErrInvalidTarget},
		{"nil endpoint", pb.LBPolicy_LB_POLICY_RANDOM, []Target{{Weight: 1}}, Options{}, ErrInvalidTarget},
		{"duplicate address", pb.LBPolicy_LB_POLICY_RING_HASH, append(weighted(eps), Target{EP: dup, Weight: 1}), Options{}, ErrInvalidTarget},
		{"panic threshold 100", pb.LBPolicy_LB_POLICY_RANDOM, weighted(eps), Options{PanicThresholdPercent: 100}, nil},
		{"panic threshold 101", pb.LBPolicy_LB_POLICY_RANDOM, weighted(eps), Options{PanicThresholdPercent: 101}, ErrInvalidOptions},
		{"negative ring size", pb.LBPolicy_LB_POLICY_RING_HASH, weighted(eps), Options{RingMinSize: -1}, ErrInvalidOptions},
		{"ring min above max", pb.LBPolicy_LB_POLICY_RING_HASH, weighted(eps), Options{RingMinSize: 100, RingMaxSize: 10}, ErrInvalidOptions},
		{"ring max below targets", pb.LBPolicy_LB_POLICY_RING_HASH, weighted(eps), Options{RingMinSize: 2, RingMaxSize: 2}, ErrInvalidOptions},
		{"maglev size not prime", pb.LBPolicy_LB_POLICY_MAGLEV, weighted(eps), Options{MaglevTableSize: 65536}, ErrInvalidOptions},
		{"maglev size one", pb.LBPolicy_LB_POLICY_MAGLEV, weighted(eps), Options{MaglevTableSize: 1}, ErrInvalidOptions},
		{"maglev size too large", pb.LBPolicy_LB_POLICY_MAGLEV, weighted(eps), Options{MaglevTableSize: 16777259}, ErrInvalidOptions},
		{"maglev size below targets", pb.LBPolicy_LB_POLICY_MAGLEV, weighted(eps), Options{MaglevTableSize: 2}, ErrInvalidOptions},
		{"maglev small prime", pb.LBPolicy_LB_POLICY_MAGLEV, weighted(eps), Options{MaglevTableSize: 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.policy, tc.targets, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New error = %v, want %v", err, tc.want)
			}
			if err == nil && b == nil {
				t.Fatal("nil balancer without error")
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(policyName(p), func(t *testing.T) {
			b := mustNew(t, p, nil, Options{})
			if ep := b.Pick(keyReq(1)); ep != nil {
				t.Fatalf("Pick on no targets = %s", ep.Addr)
			}
			if ep := b.Pick(nil); ep != nil {
				t.Fatalf("Pick(nil) on no targets = %s", ep.Addr)
			}
		})
	}
}

// TestPanicThreshold checks Envoy's panic mode on every policy: below the
// threshold traffic spreads over all endpoints, above it only over the
// available ones.
func TestPanicThreshold(t *testing.T) {
	tests := []struct {
		name      string
		down      int    // endpoints 0..down-1 are unavailable
		threshold uint32 // percent
		wantAll   bool   // picks reach every endpoint; else only available ones
		wantNil   bool
	}{
		{"1 of 4 available, 50%: panic", 3, 50, true, false},
		{"3 of 4 available, 50%: no panic", 1, 50, false, false},
		{"2 of 4 available, 50%: at the threshold, no panic", 2, 50, false, false},
		{"3 of 4 available, 100%: panic", 1, 100, true, false},
		{"none available, 50%: panic", 4, 50, true, false},
		{"1 of 4 available, disabled", 3, 0, false, false},
		{"none available, disabled: nil", 4, 0, false, true},
	}
	for _, p := range allPolicies {
		for _, tc := range tests {
			t.Run(policyName(p)+"/"+tc.name, func(t *testing.T) {
				eps := newEPs(4)
				for _, ep := range eps[:tc.down] {
					ep.SetActiveHealthy(false)
				}
				b := mustNew(t, p, weighted(eps), Options{PanicThresholdPercent: tc.threshold, Rand: seeded(1)})
				if tc.wantNil {
					if ep := b.Pick(keyReq(0)); ep != nil {
						t.Fatalf("Pick = %s, want nil", ep.Addr)
					}
					return
				}
				got := picks(t, b, 4000, keyReq)
				for i, ep := range eps {
					switch {
					case tc.wantAll && got[ep] < 400:
						t.Errorf("%s picked %d of 4000 times, want about 1000 (panic mode spreads over all)", ep.Addr, got[ep])
					case !tc.wantAll && i < tc.down && got[ep] != 0:
						t.Errorf("unavailable %s picked %d times outside panic mode", ep.Addr, got[ep])
					case !tc.wantAll && i >= tc.down && got[ep] < 4000/(4-tc.down)/3:
						t.Errorf("available %s picked only %d of 4000 times", ep.Addr, got[ep])
					}
				}
			})
		}
	}
}

// TestTried checks that every policy avoids endpoints a request already
// tried while another eligible one exists, and still answers when all
// were tried.
func TestTried(t *testing.T) {
	for _, p := range allPolicies {
		t.Run(policyName(p), func(t *testing.T) {
			eps := newEPs(4)
			eps[3].SetActiveHealthy(false)
			b := mustNew(t, p, weighted(eps, 1, 2, 3, 4), Options{PanicThresholdPercent: 50, Rand: seeded(2)})
			tried := map[*endpoint.Endpoint]bool{eps[0]: true, eps[1]: true}
			f := func(ep *endpoint.Endpoint) bool { return tried[ep] }
			for i := range 1000 {
				req := keyReq(i)
				req.Tried = f
				if ep := b.Pick(req); ep != eps[2] {
					t.Fatalf("pick %d = %v, want the only untried available endpoint %s", i, ep, eps[2].Addr)
				}
			}
			tried[eps[2]] = true
			got := picks(t, b, 1000, func(i int) *Request {
				req := keyReq(i)
				req.Tried = f
				return req
			})
			if got[eps[3]] != 0 {
				t.Fatalf("all available tried: the unavailable endpoint was picked %d times", got[eps[3]])
			}
		})
	}
}

// TestConcurrentPicks runs every policy from several goroutines under
// -race; round robin must still deal out exact shares.
func TestConcurrentPicks(t *testing.T) {
	const workers, each = 4, 1400
	for _, p := range allPolicies {
		t.Run(policyName(p), func(t *testing.T) {
			eps := newEPs(3)
			b := mustNew(t, p, weighted(eps, 5, 1, 1), Options{PanicThresholdPercent: 50})
			var mu sync.Mutex
			got := map[*endpoint.Endpoint]int{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					local := map[*endpoint.Endpoint]int{}
					for i := range each {
						req := keyReq(w*each + i)
						ep := b.Pick(req)
						ep.Begin()
						ep.ObserveLatency(time.Millisecond, now)
						ep.End()
						local[ep]++
					}
					mu.Lock()
					defer mu.Unlock()
					for ep, n := range local {
						got[ep] += n
					}
				})
			}
			wg.Wait()
			total := 0
			for _, n := range got {
				total += n
			}
			if total != workers*each {
				t.Fatalf("%d picks, want %d", total, workers*each)
			}
			if p == pb.LBPolicy_LB_POLICY_ROUND_ROBIN {
				want := []int{workers * each * 5 / 7, workers * each / 7, workers * each / 7}
				for i, ep := range eps {
					if got[ep] != want[i] {
						t.Errorf("%s: %d picks, want exactly %d", ep.Addr, got[ep], want[i])
					}
				}
			}
		})
	}
}

// TestZeroAllocs checks that Pick does not allocate for any policy, on the
// fast path and on the degraded one (unavailable endpoints, retries).
func TestZeroAllocs(t *testing.T) {
	for _, p := range allPolicies {
		for _, degraded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/degraded=%v", policyName(p), degraded), func(t *testing.T) {
				eps := newEPs(16)
				req := &Request{Now: now, HasHash: true}
				if degraded {
					for _, ep := range eps[:6] {
						ep.Eject(now.Add(time.Minute))
					}
					req.Tried = func(ep *endpoint.Endpoint) bool { return ep == eps[7] || ep == eps[9] }
				}
				b := mustNew(t, p, weighted(eps, 1, 2, 3, 4, 5, 6, 7, 8), Options{PanicThresholdPercent: 50})
				var i uint64
				allocs := testing.AllocsPerRun(1000, func() {
					i++
					req.Hash = i * 0x9e3779b97f4a7c15
					if b.Pick(req) == nil {
						panic("nil pick")
					}
				})
				if allocs != 0 {
					t.Fatalf("Pick allocates %v times per call", allocs)
				}
			})
		}
	}
}

func BenchmarkPick(b *testing.B) {
	for _, p := range allPolicies {
		b.Run(policyName(p), func(b *testing.B) {
			eps := newEPs(16)
			for i, ep := range eps {
				ep.ObserveLatency(time.Duration(i+1)*time.Millisecond, now)
			}
			bal := mustNew(b, p, weighted(eps), Options{PanicThresholdPercent: 50})
			req := &Request{Now: now, HasHash: true}
			b.ReportAllocs()
			var i uint64
			for b.Loop() {
				i++
				req.Hash = i
				bal.Pick(req)
			}
		})
	}
}

// FuzzNewPick builds every policy from arbitrary weights, availability,
// retries and options, and checks that New either fails cleanly or gives a
// balancer whose picks obey the rules: a member of the targets, available
// unless in panic mode, untried while an untried eligible endpoint exists,
// nil only when nothing is eligible.
func FuzzNewPick(f *testing.F) {
	f.Add([]byte{0, 4, 50, 1, 1, 1, 1, 0b0001, 0b0000, 7})
	f.Add([]byte{6, 10, 50, 5, 1, 1, 9, 200, 3, 3, 3, 3, 3, 0b1111, 0b0011, 1})
	f.Add([]byte{7, 3, 0, 0, 1, 2, 0b111, 0, 9})
	f.Add([]byte{3, 2, 101, 1, 1, 0, 0, 0})
	f.Add([]byte{5, 1, 100, 255, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		policy := pb.LBPolicy(next() % 9) // 8 is unknown
		n := int(next() % 24)
		thr := uint32(next() % 110)
		eps := newEPs(n)
		ts := make([]Target, n)
		for i := range ts {
			ts[i] = Target{EP: eps[i], Weight: uint32(next()) * uint32(next()%4+1) << (next() % 24)}
		}
		down, tried := map[int]bool{}, map[*endpoint.Endpoint]bool{}
		for i, ep := range eps {
			if next()%3 == 0 {
				ep.SetActiveHealthy(false)
				down[i] = true
			}
			if next()%4 == 0 {
				tried[ep] = true
			}
		}
		opts := Options{
			PanicThresholdPercent: thr,
			Rand:                  seeded(uint64(next())),
			RingMinSize:           int(next()),
			MaglevTableSize:       []uint64{0, 2, 3, 31, 251, 65536}[next()%6],
		}
		b, err := New(policy, ts, opts)
		if err != nil {
			return
		}
		avail, availUntried, untried := 0, 0, 0
		for i, ep := range eps {
			if !down[i] {
				avail++
			}
			if !tried[ep] {
				untried++
				if !down[i] {
					availUntried++
				}
			}
		}
		panicking := thr > 0 && avail*100 < int(thr)*n
		members := map[*endpoint.Endpoint]int{}
		for i, ep := range eps {
			members[ep] = i
		}
		for k := range 8 {
			req := &Request{Now: now, Hash: uint64(next()) << (k * 8), HasHash: k%2 == 0}
			if k >= 4 {
				req.Tried = func(ep *endpoint.Endpoint) bool { return tried[ep] }
			}
			ep := b.Pick(req)
			wantNil := n == 0 || (!panicking && avail == 0)
			if ep == nil {
				if !wantNil {
					t.Fatalf("nil pick with %d targets, %d available, panic=%v", n, avail, panicking)
				}
				continue
			}
			if wantNil {
				t.Fatalf("pick %s, want nil", ep.Addr)
			}
			i, ok := members[ep]
			if !ok {
				t.Fatalf("pick %s is not a target", ep.Addr)
			}
			if !panicking && down[i] {
				t.Fatalf("unavailable %s picked outside panic mode", ep.Addr)
			}
			if req.Tried != nil && tried[ep] && ((panicking && untried > 0) || (!panicking && availUntried > 0)) {
				t.Fatalf("tried %s picked while an untried one was eligible", ep.Addr)
			}
		}
	})
}

// BenchmarkNew measures building a balancer, which happens on every
// configuration change of its backend.
func BenchmarkNew(b *testing.B) {
	ts := weighted(newEPs(100))
	for i := range ts {
		ts[i].Weight = uint32(i%7 + 1)
	}
	for _, p := range hashPolicies {
		b.Run(policyName(p), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mustNew(b, p, ts, Options{})
			}
		})
	}
}
