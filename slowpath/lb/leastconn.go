package lb

import "github.com/novaedge/novaedge/slowpath/endpoint"

var _ Balancer = (*leastConn)(nil)

// leastConn picks the endpoint with the fewest requests (or connections) in
// flight relative to its weight. Ties are broken at random in proportion to
// weight (weighted reservoir sampling), so an idle pool is spread by weight
// rather than always sent to the first endpoint.
type leastConn struct{ pool }

func (l *leastConn) Pick(req *Request) *endpoint.Endpoint {
	if len(l.eps) == 0 {
		return nil
	}
	c := newCtx(req)
	// First pass: the least loaded among fine endpoints, counting the
	// pool's state on the way. That is the answer unless panic mode or
	// retries widen the set.
	var t tally
	best, sum := -1, uint64(0)
	for i, ep := range l.eps {
		avail, tried := ep.Available(c.now), c.isTried(ep)
		t.add(avail, tried)
		if avail && !tried {
			best, sum = l.consider(i, best, sum)
		}
	}
	v := l.viewOf(t)
	switch {
	case !v.any:
		return nil
	case !v.panic && v.strict:
		return l.eps[best]
	}
	best, sum = -1, 0
	for i, ep := range l.eps {
		if v.accepts(&c, ep) {
			best, sum = l.consider(i, best, sum)
		}
	}
	if best < 0 {
		return nil // health changed between the passes
	}
	return l.eps[best]
}

// consider folds candidate i into the running choice best, where sum is
// the total weight of the candidates tied with best.
func (l *leastConn) consider(i, best int, sum uint64) (int, uint64) {
	w := uint64(l.weights[i])
	if best < 0 {
		return i, w
	}
	switch loadCmp(l.eps[i].Inflight(), l.weights[i], l.eps[best].Inflight(), l.weights[best]) {
	case -1:
		return i, w
	case 0:
		sum += w
		if l.intn(sum) < w {
			return i, sum
		}
		return best, sum
	default:
		return best, sum
	}
}
