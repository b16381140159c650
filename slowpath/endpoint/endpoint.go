// Package endpoint holds the live state of one backend endpoint that the slow
// path's balancers read and its health checkers and proxy write: requests in
// flight, peak-EWMA latency, active health and passive ejection. An Endpoint
// outlives configurations: the slow path keeps one per backend and
// address:port across reloads, so load and health carry over.
package endpoint

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint is one backend address. All methods are safe for concurrent use.
type Endpoint struct {
	// Addr is "host:port" ("[v6]:port" for IPv6): the stable key that
	// consistent hashing uses and that logs name.
	Addr string

	inflight     atomic.Int64
	activeDown   atomic.Bool
	ejectedUntil atomic.Int64 // Unix nanoseconds; 0: not ejected

	ewmaMu   sync.Mutex
	ewma     float64 // nanoseconds
	ewmaAt   int64   // Unix nanoseconds of the last observation
	ewmaSeen bool
}

// New returns an endpoint that is healthy, not ejected and idle.
func New(addr string) *Endpoint { return &Endpoint{Addr: addr} }

// Available reports whether the endpoint may take new requests at now: its
// active health check (if any) passes and it is not ejected.
func (e *Endpoint) Available(now time.Time) bool {
	return !e.activeDown.Load() && !e.Ejected(now)
}

// ActiveHealthy reports the active health check's verdict (true when no
// check runs).
func (e *Endpoint) ActiveHealthy() bool { return !e.activeDown.Load() }

// SetActiveHealthy records the active health check's verdict.
func (e *Endpoint) SetActiveHealthy(ok bool) { e.activeDown.Store(!ok) }

// Ejected reports whether passive outlier detection has ejected the
// endpoint until after now.
func (e *Endpoint) Ejected(now time.Time) bool {
	u := e.ejectedUntil.Load()
	return u != 0 && now.UnixNano() < u
}

// EjectedUntil returns when the current ejection ends (zero: none).
func (e *Endpoint) EjectedUntil() time.Time {
	u := e.ejectedUntil.Load()
	if u == 0 {
		return time.Time{}
	}
	return time.Unix(0, u)
}

// Eject keeps the endpoint out of balancing until until.
func (e *Endpoint) Eject(until time.Time) { e.ejectedUntil.Store(until.UnixNano()) }

// Uneject ends an ejection early.
func (e *Endpoint) Uneject() { e.ejectedUntil.Store(0) }

// Inflight returns the requests (or connections) in flight.
func (e *Endpoint) Inflight() int64 { return e.inflight.Load() }

// Begin counts a request in flight; End must follow.
func (e *Endpoint) Begin() { e.inflight.Add(1) }

// End counts a request as finished.
func (e *Endpoint) End() { e.inflight.Add(-1) }

// DecayTime is the time constant of the latency EWMA: an observation's
// weight halves roughly every 0.7 * DecayTime (Finagle's and Linkerd's
// peak-EWMA use 10s).
const DecayTime = 10 * time.Second

// ObserveLatency feeds one response time measured at now into the peak
// EWMA: a latency above the average replaces it at once (peak), a lower one
// pulls it down with exponential decay over the time since the last
// observation, so a backend that got slow is avoided immediately and one
// that recovered is trusted gradually.
func (e *Endpoint) ObserveLatency(d time.Duration, now time.Time) {
	rtt := float64(d)
	t := now.UnixNano()
	e.ewmaMu.Lock()
	defer e.ewmaMu.Unlock()
	if !e.ewmaSeen || rtt > e.ewma {
		e.ewma, e.ewmaAt, e.ewmaSeen = rtt, t, true
		return
	}
	dt := max(float64(t-e.ewmaAt), 0)
	w := math.Exp(-dt / float64(DecayTime))
	e.ewma = e.ewma*w + rtt*(1-w)
	e.ewmaAt = t
}

// Latency returns the peak-EWMA latency and whether any was observed.
func (e *Endpoint) Latency() (time.Duration, bool) {
	e.ewmaMu.Lock()
	defer e.ewmaMu.Unlock()
	return time.Duration(e.ewma), e.ewmaSeen
}

// LatencyAt returns the peak-EWMA latency as seen at now: without new
// observations it decays toward zero with DecayTime (as Finagle's peak EWMA
// does on read), so an endpoint that was slow once and then got no traffic
// is tried again after a while instead of being avoided forever.
func (e *Endpoint) LatencyAt(now time.Time) (time.Duration, bool) {
	e.ewmaMu.Lock()
	defer e.ewmaMu.Unlock()
	if !e.ewmaSeen {
		return 0, false
	}
	dt := float64(now.UnixNano() - e.ewmaAt)
	if dt <= 0 {
		return time.Duration(e.ewma), true
	}
	return time.Duration(e.ewma * math.Exp(-dt/float64(DecayTime))), true
}
