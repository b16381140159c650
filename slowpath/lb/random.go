package lb

import (
	"time"

	"github.com/novaedge/novaedge/slowpath/endpoint"
)

var (
	_ Balancer = (*random)(nil)
	_ Balancer = (*p2c)(nil)
	_ Balancer = (*ewma)(nil)
)

// random picks an endpoint with probability proportional to its weight.
type random struct{ pool }

func (r *random) Pick(req *Request) *endpoint.Endpoint {
	c := newCtx(req)
	return r.pickRandom(&c)
}

// p2c is the power of two choices (least request): it draws two distinct
// endpoints by weight and picks the one with fewer requests in flight
// relative to its weight; on a tie, the first draw, itself random. With
// equal weights this is the classic P2C; at zero load the picks follow the
// weights.
type p2c struct{ pool }

func (p *p2c) Pick(req *Request) *endpoint.Endpoint {
	c := newCtx(req)
	a, b := p.pickTwo(&c)
	switch {
	case a < 0:
		return nil
	case b < 0:
		return p.eps[a]
	}
	if loadCmp(p.eps[b].Inflight(), p.weights[b], p.eps[a].Inflight(), p.weights[a]) < 0 {
		return p.eps[b]
	}
	return p.eps[a]
}

// ewma is peak EWMA (Finagle, Linkerd): it draws two distinct endpoints by
// weight and picks the one whose cost latency × (in flight + 1) / weight is
// lower; on a tie, the first draw. The latency is the endpoint's peak EWMA,
// so an endpoint that just got slow is avoided at once.
//
// An endpoint without observations takes the other draw's latency: the
// comparison is then decided by load alone, so a new endpoint is tried as
// soon as it is no busier, without being flooded (a fixed default would be
// too fast for some backends and too slow for others, and one that looks
// slower is never tried, so never measured).
type ewma struct{ pool }

func (e *ewma) Pick(req *Request) *endpoint.Endpoint {
	c := newCtx(req)
	a, b := e.pickTwo(&c)
	switch {
	case a < 0:
		return nil
	case b < 0:
		return e.eps[a]
	}
	// Read with decay, so an idle endpoint's old peak fades.
	la, oka := e.eps[a].LatencyAt(c.now)
	lb, okb := e.eps[b].LatencyAt(c.now)
	switch {
	case !oka && !okb:
		la, lb = 1, 1
	case !oka:
		la = lb
	case !okb:
		lb = la
	}
	if e.cost(b, lb) < e.cost(a, la) {
		return e.eps[b]
	}
	return e.eps[a]
}

func (e *ewma) cost(i int, lat time.Duration) float64 {
	// A zero latency would make load irrelevant; 1ns keeps it counting.
	l := float64(max(lat, 1))
	return l * float64(max(e.eps[i].Inflight(), 0)+1) / float64(e.weights[i])
}
