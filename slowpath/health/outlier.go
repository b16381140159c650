package health

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// Defaults of OutlierConfig's zero fields.
const (
	DefaultBaseEjectionTime   = 30 * time.Second
	DefaultMaxEjectionTime    = 300 * time.Second
	DefaultMaxEjectionPercent = 10
)

// OutlierConfig configures passive outlier detection.
type OutlierConfig struct {
	// ConsecutiveFailures is the number of failed requests in a row that
	// eject an endpoint. Zero disables detection.
	ConsecutiveFailures int
	// Interval, when not zero, is the window the last ConsecutiveFailures
	// failures must fit in: failures spread wider do not eject. Zero means
	// no window.
	Interval time.Duration
	// BaseEjectionTime is the length of a first ejection; the n-th lasts n
	// times as long. Zero means DefaultBaseEjectionTime.
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps an ejection's length. Zero means
	// DefaultMaxEjectionTime; a value below BaseEjectionTime is raised to it.
	MaxEjectionTime time.Duration
	// MaxEjectionPercent caps the share of the endpoints ejected at once
	// (rounded down), though one endpoint may always be ejected, as in
	// Envoy. Zero means DefaultMaxEjectionPercent; above 100 means 100.
	MaxEjectionPercent int
}

// OutlierConfigFromProto compiles a backend's circuit breaker settings. The
// proto has no maximum ejection time: it is ten times the base, as the
// ProxyBackend API documents (300s for the default 30s). A nil cb disables
// detection.
func OutlierConfigFromProto(cb *pb.CircuitBreaker) OutlierConfig {
	if cb == nil {
		return OutlierConfig{}
	}
	cfg := OutlierConfig{
		ConsecutiveFailures: int(cb.GetConsecutiveFailures()),
		Interval:            time.Duration(cb.GetIntervalMs()) * time.Millisecond,
		BaseEjectionTime:    time.Duration(cb.GetBaseEjectionTimeMs()) * time.Millisecond,
		MaxEjectionPercent:  int(min(cb.GetMaxEjectionPercent(), 100)),
	}
	cfg = cfg.withDefaults()
	cfg.MaxEjectionTime = 10 * cfg.BaseEjectionTime
	return cfg
}

func (c OutlierConfig) withDefaults() OutlierConfig {
	c.ConsecutiveFailures = max(c.ConsecutiveFailures, 0)
	c.Interval = max(c.Interval, 0)
	if c.BaseEjectionTime <= 0 {
		c.BaseEjectionTime = DefaultBaseEjectionTime
	}
	if c.MaxEjectionTime <= 0 {
		c.MaxEjectionTime = DefaultMaxEjectionTime
	}
	c.MaxEjectionTime = max(c.MaxEjectionTime, c.BaseEjectionTime)
	if c.MaxEjectionPercent <= 0 {
		c.MaxEjectionPercent = DefaultMaxEjectionPercent
	}
	c.MaxEjectionPercent = min(c.MaxEjectionPercent, 100)
	return c
}

// Result is the outcome of one request at an endpoint, as the proxy saw it.
type Result int

// Results. Every one but Success counts as a failure towards ejection.
const (
	// Success is any response that is not a failure below, 4xx included:
	// client errors say nothing about the endpoint.
	Success Result = iota
	// Failure5xx is a 500-599 response from the endpoint other than a
	// gateway error.
	Failure5xx
	// GatewayError is a 502, 503 or 504 response, or an upstream error on
	// the proxy's side (e.g. a malformed response).
	GatewayError
	// ConnectFailure is a failed connection attempt.
	ConnectFailure
	// Timeout is a request that timed out waiting for the endpoint.
	Timeout
	// Reset is a connection or stream reset by the endpoint mid-request.
	Reset
)

var resultNames = [...]string{"success", "5xx", "gateway-error", "connect-failure", "timeout", "reset"}

// String returns the result's name.
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// ResultForStatus classifies an HTTP status from the endpoint: 502-504 are
// GatewayError, other 5xx Failure5xx, anything else Success.
func ResultForStatus(code int) Result {
	switch {
	case code == 502 || code == 503 || code == 504:
		return GatewayError
	case code >= 500 && code <= 599:
		return Failure5xx
	default:
		return Success
	}
}

// Outlier ejects endpoints whose requests fail repeatedly, with
// endpoint.Eject: after ConsecutiveFailures failures in a row (within
// Interval, if set) an endpoint is ejected for BaseEjectionTime × the
// number of times it has been ejected, at most MaxEjectionTime. Each full
// BaseEjectionTime an endpoint spends back in service after an ejection
// takes one off that number, as in Envoy. An ejection ends by itself when
// its time passes (endpoint.Ejected reads the clock); the endpoint then
// starts from zero failures. Outcomes reported while it is ejected (requests
// that were already under way) are ignored. An ejection that would take the
// ejected share of the endpoints above MaxEjectionPercent does not happen,
// and the endpoint's failure count starts again, as in Envoy.
//
// An ejection's end is noticed (logged, OnChange) at the endpoint's next
// Report, since nothing runs in the background.
type Outlier struct {
	clock    Clock
	log      *slog.Logger
	onChange func(*endpoint.Endpoint, bool, string)

	cfg    atomic.Pointer[OutlierConfig]
	states atomic.Pointer[map[*endpoint.Endpoint]*outlierState] // copied on write

	mu sync.Mutex // serialises Update, Reconfigure and ejections
}

type outlierState struct {
	ep *endpoint.Endpoint

	mu        sync.Mutex
	fails     []time.Time // ring of the latest failure times; its length is ConsecutiveFailures
	n         int         // consecutive failures so far
	ejected   bool        // ejected by us, end not yet noticed
	ejections int         // ejections so far less decay; the next lasts base × (ejections+1)
	decayFrom time.Time   // when the next decay period started
}

// NewOutlier returns an Outlier with no endpoints; zero fields of cfg take
// their defaults.
func NewOutlier(cfg OutlierConfig, opts Options) *Outlier {
	o := &Outlier{clock: opts.clock(), log: opts.logger(), onChange: opts.OnChange}
	cfg = cfg.withDefaults()
	o.cfg.Store(&cfg)
	m := map[*endpoint.Endpoint]*outlierState{}
	o.states.Store(&m)
	return o
}

// Update sets the endpoints watched. Endpoints present before and after keep
// their failure counts, ejection and ejection count; new ones start clean;
// removed ones are unejected, since nothing would watch them any more.
// Endpoints are identified by pointer.
func (o *Outlier) Update(eps []*endpoint.Endpoint) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.states.Load()
	n := o.cfg.Load().ConsecutiveFailures
	next := make(map[*endpoint.Endpoint]*outlierState, len(eps))
	for _, ep := range eps {
		if s, ok := old[ep]; ok {
			next[ep] = s
		} else if _, dup := next[ep]; !dup {
			next[ep] = &outlierState{ep: ep, fails: make([]time.Time, n)}
		}
	}
	o.states.Store(&next)
	for ep, s := range old {
		if _, ok := next[ep]; !ok {
			o.release(s, "no longer watched")
		}
	}
}

// release unejects an endpoint this Outlier ejected and clears its history.
func (o *Outlier) release(s *outlierState, reason string) {
	s.mu.Lock()
	was := s.ejected
	s.ejected, s.n, s.ejections = false, 0, 0
	s.mu.Unlock()
	if was {
		s.ep.Uneject()
		o.changed(s.ep, true, reason)
	}
}

// Reconfigure replaces the settings (zero fields take their defaults).
// Ejections and ejection counts carry over; a change of ConsecutiveFailures
// restarts the failure counts. Disabling detection (ConsecutiveFailures 0)
// unejects every endpoint and forgets their history.
func (o *Outlier) Reconfigure(cfg OutlierConfig) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cfg = cfg.withDefaults()
	old := o.cfg.Load()
	for _, s := range *o.states.Load() {
		if cfg.ConsecutiveFailures == 0 {
			o.release(s, "outlier detection disabled")
		}
		if cfg.ConsecutiveFailures != old.ConsecutiveFailures {
			s.mu.Lock()
			s.fails, s.n = make([]time.Time, cfg.ConsecutiveFailures), 0
			s.mu.Unlock()
		}
	}
	o.cfg.Store(&cfg)
}

// Report records the outcome of one request at ep. It is safe for
// concurrent use and cheap: a lock-free map lookup, the endpoint's own
// mutex, no allocation (except on the rare ejection). Unknown endpoints are
// ignored.
func (o *Outlier) Report(ep *endpoint.Endpoint, r Result) {
	s := (*o.states.Load())[ep]
	if s == nil {
		return
	}
	cfg := o.cfg.Load()
	s.mu.Lock()
	n := len(s.fails) // follows cfg.ConsecutiveFailures, but under s.mu
	if n == 0 {
		s.mu.Unlock()
		return
	}
	if r == Success && !s.ejected {
		// The common case needs no clock (a read per request shows in
		// profiles).
		s.n = 0
		s.mu.Unlock()
		return
	}
	now := o.clock.Now()
	back := false
	if s.ejected {
		if ep.Ejected(now) {
			s.mu.Unlock()
			return
		}
		s.ejected, s.n, back = false, 0, true
	}
	trip := false
	if r != Success {
		s.fails[s.n%n] = now
		s.n++
		trip = s.tripped(now, cfg.Interval)
	} else {
		s.n = 0
	}
	s.mu.Unlock()
	if back {
		o.changed(ep, true, "ejection ended")
	}
	if trip {
		o.eject(s, now)
	}
}

// tripped reports whether the last failures call for an ejection; s.mu is
// held.
func (s *outlierState) tripped(now time.Time, window time.Duration) bool {
	n := len(s.fails)
	if n == 0 || s.n < n {
		return false
	}
	// After s.n failures the oldest of the last n sits where the next will go.
	return window == 0 || now.Sub(s.fails[s.n%n]) <= window
}

// eject ejects s's endpoint unless the cap forbids it. o.mu makes the count
// of ejected endpoints and the ejection one step, so concurrent trips cannot
// exceed the cap together.
func (o *Outlier) eject(s *outlierState, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cfg := o.cfg.Load()
	states := *o.states.Load()
	if states[s.ep] != s {
		return // removed meanwhile
	}
	s.mu.Lock()
	if s.ejected || !s.tripped(now, cfg.Interval) {
		s.mu.Unlock()
		return // another Report ejected it, or the settings changed
	}
	failures := s.n
	s.n = 0
	ejected := 0
	for ep := range states {
		if ep.Ejected(now) {
			ejected++
		}
	}
	if limit := max(len(states)*cfg.MaxEjectionPercent/100, 1); ejected >= limit {
		s.mu.Unlock()
		o.log.Debug("endpoint not ejected: too many ejected", "endpoint", s.ep.Addr,
			"ejected", ejected, "limit", limit)
		return
	}
	s.decay(now, cfg.BaseEjectionTime)
	s.ejections++
	d := min(cfg.BaseEjectionTime*time.Duration(s.ejections), cfg.MaxEjectionTime)
	until := now.Add(d)
	s.ep.Eject(until)
	s.ejected = true
	s.decayFrom = until
	s.mu.Unlock()
	o.changed(s.ep, false, fmt.Sprintf("ejected for %s after %d consecutive failures", d, failures))
}

// decay takes one ejection off the count for each full base period the
// endpoint has been back since its last ejection ended; s.mu is held.
func (s *outlierState) decay(now time.Time, base time.Duration) {
	if s.ejections == 0 || !now.After(s.decayFrom) {
		return
	}
	k := int(now.Sub(s.decayFrom) / base)
	if k == 0 {
		return
	}
	s.ejections = max(s.ejections-k, 0)
	s.decayFrom = s.decayFrom.Add(time.Duration(k) * base)
}

func (o *Outlier) changed(ep *endpoint.Endpoint, healthy bool, reason string) {
	if healthy {
		o.log.Info("endpoint back from ejection", "endpoint", ep.Addr, "reason", reason)
	} else {
		o.log.Info("endpoint ejected", "endpoint", ep.Addr, "reason", reason)
	}
	if o.onChange != nil {
		o.onChange(ep, healthy, reason)
	}
}
