package lb

import (
	"sync"

	"github.com/novaedge/novaedge/slowpath/endpoint"
)

var _ Balancer = (*roundRobin)(nil)

// roundRobin is nginx's smooth weighted round robin: at each pick every
// eligible endpoint's current weight grows by its weight, the largest
// (first on a tie) is picked and loses the sum of the weights. Weights 5,
// 1, 1 give a a b a c a a: exact shares per cycle, the heavy one
// interleaved rather than in a burst.
//
// Each pick walks all endpoints under a mutex, which is the price of exact
// smooth interleaving.
type roundRobin struct {
	pool
	mu    sync.Mutex
	cur   []int64 // current weights, guarded by mu
	state []uint8 // scratch for one pick, guarded by mu
}

const (
	stAvail uint8 = 1 << iota
	stTried
)

func newRoundRobin(p pool) *roundRobin {
	return &roundRobin{pool: p, cur: make([]int64, len(p.eps)), state: make([]uint8, len(p.eps))}
}

func (r *roundRobin) Pick(req *Request) *endpoint.Endpoint {
	if len(r.eps) == 0 {
		return nil
	}
	c := newCtx(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Read each endpoint's state once, so the view and the pick agree
	// even if health changes meanwhile.
	var t tally
	for i, ep := range r.eps {
		var s uint8
		avail, tried := ep.Available(c.now), c.isTried(ep)
		if avail {
			s |= stAvail
		}
		if tried {
			s |= stTried
		}
		r.state[i] = s
		t.add(avail, tried)
	}
	v := r.viewOf(t)
	if !v.any {
		return nil
	}
	best := -1
	var total int64
	for i, s := range r.state {
		if !v.acceptsState(s&stAvail != 0, s&stTried != 0) {
			continue
		}
		w := int64(r.weights[i])
		r.cur[i] += w
		total += w
		if best < 0 || r.cur[i] > r.cur[best] {
			best = i
		}
	}
	r.cur[best] -= total
	return r.eps[best]
}
