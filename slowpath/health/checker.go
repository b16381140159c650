package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// Checker probes a set of endpoints actively and records the verdicts with
// endpoint.SetActiveHealthy. Each endpoint has one goroutine that probes,
// waits for the interval (plus jitter) and probes again, so probes of one
// endpoint never overlap.
//
// A new endpoint counts as healthy until its first probe, which runs at
// once; a failed first probe marks it unhealthy immediately, so an endpoint
// that is down at start-up gets no traffic for a whole threshold's worth of
// intervals. After that a healthy endpoint turns unhealthy after
// UnhealthyThreshold consecutive failures, and an unhealthy one healthy
// after HealthyThreshold consecutive successes.
//
// All methods are safe for concurrent use.
type Checker struct {
	clock    Clock
	log      *slog.Logger
	onChange func(*endpoint.Endpoint, bool, string)
	rand     func() float64
	override func(context.Context, Config, string) error

	cur atomic.Pointer[compiled]

	mu      sync.Mutex // serialises Update, Reconfigure and Stop
	targets map[*endpoint.Endpoint]*target
	stopped bool
}

// compiled is one configuration with its probe, swapped as a whole.
type compiled struct {
	cfg   Config
	probe probeFunc
}

// target is one checked endpoint. The counters and verdict belong to its
// goroutine; others read them only after done is closed.
type target struct {
	ep     *endpoint.Endpoint
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // the configuration changed; capacity 1
	done   chan struct{} // closed when the goroutine has ended

	probed    bool
	healthy   bool
	successes int
	failures  int
}

// NewChecker returns a Checker with no endpoints; zero fields of cfg take
// their defaults. Nothing runs until Update.
func NewChecker(cfg Config, opts Options) *Checker {
	c := &Checker{
		clock:    opts.clock(),
		log:      opts.logger(),
		onChange: opts.OnChange,
		rand:     opts.Rand,
		override: opts.probe,
		targets:  make(map[*endpoint.Endpoint]*target),
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	c.cur.Store(c.compile(cfg))
	return c
}

func (c *Checker) compile(cfg Config) *compiled {
	cfg = cfg.withDefaults()
	cc := &compiled{cfg: cfg}
	if c.override != nil {
		cc.probe = func(ctx context.Context, addr string) error { return c.override(ctx, cfg, addr) }
	} else {
		cc.probe = newProbe(cfg)
	}
	return cc
}

// Update sets the endpoints to check. New ones are probed at once; removed
// ones stop being probed (Update waits for their goroutines to end) and are
// marked healthy again, since nothing judges them any more; endpoints present
// before and after keep their goroutine, counters and verdict, so a reload
// does not reset health. Endpoints are identified by pointer. After Stop,
// Update does nothing.
func (c *Checker) Update(eps []*endpoint.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	keep := make(map[*endpoint.Endpoint]bool, len(eps))
	for _, ep := range eps {
		keep[ep] = true
	}
	var gone []*target
	for ep, t := range c.targets {
		if !keep[ep] {
			t.cancel()
			gone = append(gone, t)
			delete(c.targets, ep)
		}
	}
	for _, ep := range eps {
		if _, ok := c.targets[ep]; ok {
			continue
		}
		t := c.newTarget(ep)
		c.targets[ep] = t
		go c.run(t)
	}
	for _, t := range gone {
		c.release(t)
	}
}

func (c *Checker) newTarget(ep *endpoint.Endpoint) *target {
	ctx, cancel := context.WithCancel(context.Background())
	return &target{
		ep:      ep,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		healthy: true,
	}
}

// release waits for a cancelled target's goroutine and clears its verdict.
func (c *Checker) release(t *target) {
	<-t.done
	t.ep.SetActiveHealthy(true)
	if !t.healthy {
		c.changed(t.ep, true, "no longer checked")
	}
}

// Reconfigure replaces the check settings (zero fields take their defaults)
// while every endpoint keeps its counters and verdict; the next probe of each
// uses the new settings. A probe under way finishes with the old ones. When
// the interval shrinks, no endpoint waits longer than the new interval (plus
// jitter) from now.
func (c *Checker) Reconfigure(cfg Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur.Store(c.compile(cfg))
	for _, t := range c.targets {
		select {
		case t.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// Stop ends every probe (cancelling those under way), waits for the
// goroutines, and marks the endpoints healthy again, as Update does for
// removed ones. It is idempotent.
func (c *Checker) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for _, t := range c.targets {
		t.cancel()
	}
	for ep, t := range c.targets {
		c.release(t)
		delete(c.targets, ep)
	}
}

// run is the goroutine of one endpoint: probe, wait, repeat, until
// cancelled.
func (c *Checker) run(t *target) {
	defer close(t.done)
	for {
		cc := c.cur.Load()
		err := c.probe(t, cc)
		if t.ctx.Err() != nil {
			return // removed mid-probe: the result means nothing
		}
		c.record(t, cc.cfg, err)
		if !c.wait(t) {
			return
		}
	}
}

func (c *Checker) probe(t *target, cc *compiled) error {
	addr, err := probeAddr(t.ep.Addr, cc.cfg.Port)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, cc.cfg.Timeout)
	defer cancel()
	err = cc.probe(ctx, addr)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// gRPC status errors do not wrap the context's, so say it here.
		err = fmt.Errorf("timed out after %s: %w", cc.cfg.Timeout, err)
	}
	return err
}

// wait sleeps for the jittered interval of the settings in force and
// reports false when the target was cancelled meanwhile. A Reconfigure may
// shorten the wait.
func (c *Checker) wait(t *target) bool {
	// The settings are read after taking any wake-up left by a Reconfigure
	// during the probe: the wait starts from the newest interval at once,
	// rather than from the probe's and then shortened.
	select {
	case <-t.wake:
	default:
	}
	deadline := c.clock.Now().Add(c.jitter(c.cur.Load().cfg.Interval))
	for {
		timer := c.clock.NewTimer(deadline.Sub(c.clock.Now()))
		select {
		case <-t.ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
			return true
		case <-t.wake:
			timer.Stop()
			if d := c.clock.Now().Add(c.jitter(c.cur.Load().cfg.Interval)); d.Before(deadline) {
				deadline = d
			}
		}
	}
}

func (c *Checker) jitter(interval time.Duration) time.Duration {
	return interval + time.Duration(float64(interval)*MaxJitter*c.rand())
}

// record applies one probe result to the thresholds and publishes the
// verdict.
func (c *Checker) record(t *target, cfg Config, err error) {
	first := !t.probed
	t.probed = true
	if err == nil {
		t.successes++
		t.failures = 0
	} else {
		t.failures++
		t.successes = 0
		c.log.Debug("health probe failed", "endpoint", t.ep.Addr, "error", err)
	}
	var reason string
	switch {
	case t.healthy && err != nil && first:
		reason = "first probe failed: " + err.Error()
	case t.healthy && err != nil && t.failures >= cfg.UnhealthyThreshold:
		reason = fmt.Sprintf("%d consecutive probes failed, last: %v", t.failures, err)
	case !t.healthy && err == nil && t.successes >= cfg.HealthyThreshold:
		reason = fmt.Sprintf("%d consecutive probes passed", t.successes)
	}
	// Written on every probe, not only on changes, so the endpoint always
	// shows this checker's verdict.
	if reason != "" {
		t.healthy = !t.healthy
	}
	t.ep.SetActiveHealthy(t.healthy)
	if reason != "" {
		c.changed(t.ep, t.healthy, reason)
	}
}

func (c *Checker) changed(ep *endpoint.Endpoint, healthy bool, reason string) {
	if healthy {
		c.log.Info("endpoint healthy", "endpoint", ep.Addr, "reason", reason)
	} else {
		c.log.Info("endpoint unhealthy", "endpoint", ep.Addr, "reason", reason)
	}
	if c.onChange != nil {
		c.onChange(ep, healthy, reason)
	}
}
