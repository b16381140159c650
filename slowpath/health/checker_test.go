package health

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// Settings of the fake-probe tests: long enough that the probes' real
// timeout never fires while a test holds a probe.
const (
	testInterval = time.Hour
	testTimeout  = time.Hour
)

var errProbe = errors.New("probe failed")

// probeCall is one probe held by fakeProber until the test replies.
type probeCall struct {
	ctx   context.Context
	cfg   Config
	addr  string
	reply chan error
}

// fakeProber hands every probe to the test through calls and returns what
// the test replies.
type fakeProber struct {
	calls     chan probeCall
	active    atomic.Int32
	maxActive atomic.Int32
}

func newFakeProber() *fakeProber { return &fakeProber{calls: make(chan probeCall)} }

func (p *fakeProber) probe(ctx context.Context, cfg Config, addr string) error {
	n := p.active.Add(1)
	defer p.active.Add(-1)
	for {
		m := p.maxActive.Load()
		if n <= m || p.maxActive.CompareAndSwap(m, n) {
			break
		}
	}
	call := probeCall{ctx: ctx, cfg: cfg, addr: addr, reply: make(chan error)}
	select {
	case p.calls <- call:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-call.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next probe; the deadline only guards against a hang.
func (p *fakeProber) next(t *testing.T) probeCall {
	t.Helper()
	select {
	case c := <-p.calls:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no probe arrived")
		return probeCall{}
	}
}

// change is one OnChange call.
type change struct {
	Addr    string
	Healthy bool
}

type changeLog struct {
	mu  sync.Mutex
	got []change
}

func (l *changeLog) record(ep *endpoint.Endpoint, healthy bool, _ string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, change{ep.Addr, healthy})
}

func (l *changeLog) take() []change {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

type checkerEnv struct {
	clk     *fakeClock
	prober  *fakeProber
	changes *changeLog
	c       *Checker
}

func newCheckerEnv(t *testing.T, cfg Config) *checkerEnv {
	t.Helper()
	e := &checkerEnv{clk: newFakeClock(), prober: newFakeProber(), changes: &changeLog{}}
	e.c = NewChecker(cfg, Options{
		Clock:    e.clk,
		OnChange: e.changes.record,
		Rand:     func() float64 { return 0 },
		probe:    e.prober.probe,
	})
	t.Cleanup(e.c.Stop)
	return e
}

func testConfig() Config {
	return Config{Type: TypeTCP, Interval: testInterval, Timeout: testTimeout, HealthyThreshold: 2, UnhealthyThreshold: 3}
}

// result turns a test's "S"/"F" into a probe result.
func result(s string) error {
	if s == "F" {
		return errProbe
	}
	return nil
}

func TestCheckerThresholds(t *testing.T) {
	tests := []struct {
		name    string
		results []string // probe results in order: S or F
		healthy []bool   // verdict after each
		changes []change
	}{
		{
			name:    "first probe passes",
			results: []string{"S", "S"},
			healthy: []bool{true, true},
		},
		{
			name:    "failed first probe marks unhealthy at once, two successes restore",
			results: []string{"F", "S", "S", "S"},
			healthy: []bool{false, false, true, true},
			changes: []change{{"a:1", false}, {"a:1", true}},
		},
		{
			name:    "unhealthy at the third consecutive failure, healthy at the second success",
			results: []string{"S", "F", "F", "F", "S", "S"},
			healthy: []bool{true, true, true, false, false, true},
			changes: []change{{"a:1", false}, {"a:1", true}},
		},
		{
			name:    "a success breaks a failure streak",
			results: []string{"S", "F", "F", "S", "F", "F", "S"},
			healthy: []bool{true, true, true, true, true, true, true},
		},
		{
			name:    "a failure breaks a success streak",
			results: []string{"F", "S", "F", "S", "S"},
			healthy: []bool{false, false, false, false, true},
			changes: []change{{"a:1", false}, {"a:1", true}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newCheckerEnv(t, testConfig())
			ep := endpoint.New("a:1")
			e.c.Update([]*endpoint.Endpoint{ep})
			var got []bool
			for i, r := range tc.results {
				if i > 0 {
					e.clk.Advance(testInterval)
				}
				// The first probe runs without the clock moving.
				call := e.prober.next(t)
				call.reply <- result(r)
				e.clk.WaitTimers(t, 1)
				got = append(got, ep.ActiveHealthy())
			}
			if d := cmp.Diff(tc.healthy, got); d != "" {
				t.Errorf("verdicts (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.changes, e.changes.take()); d != "" {
				t.Errorf("OnChange calls (-want +got):\n%s", d)
			}
		})
	}
}

func TestCheckerJitter(t *testing.T) {
	tests := []struct {
		name string
		rand float64
		want time.Duration
	}{
		{"none", 0, 10 * time.Second},
		{"half", 0.5, 10*time.Second + 500*time.Millisecond},
		{"most", 0.9, 10*time.Second + 900*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk, p := newFakeClock(), newFakeProber()
			c := NewChecker(Config{Type: TypeTCP, Interval: 10 * time.Second, Timeout: time.Second},
				Options{Clock: clk, Rand: func() float64 { return tc.rand }, probe: p.probe})
			defer c.Stop()
			c.Update([]*endpoint.Endpoint{endpoint.New("a:1")})
			p.next(t).reply <- nil
			if d := cmp.Diff([]time.Duration{tc.want}, clk.WaitTimers(t, 1)); d != "" {
				t.Errorf("wait (-want +got):\n%s", d)
			}
		})
	}
}

func TestCheckerProbesNeverOverlap(t *testing.T) {
	e := newCheckerEnv(t, testConfig())
	ep := endpoint.New("a:1")
	e.c.Update([]*endpoint.Endpoint{ep})
	held := e.prober.next(t)
	// While the first probe hangs, everything that could start another one
	// happens: time passes many intervals, the endpoint is updated again,
	// the settings change.
	for range 5 {
		e.clk.Advance(testInterval)
	}
	e.c.Update([]*endpoint.Endpoint{ep})
	shorter := testConfig()
	shorter.Interval = time.Minute
	e.c.Reconfigure(shorter)
	e.clk.Advance(time.Hour)
	e.c.Update([]*endpoint.Endpoint{ep})
	if n := e.prober.active.Load(); n != 1 {
		t.Fatalf("%d probes under way, want 1", n)
	}
	held.reply <- nil
	// The next probe waits for the (new) interval after the first ended.
	if d := cmp.Diff([]time.Duration{time.Minute}, e.clk.WaitTimers(t, 1)); d != "" {
		t.Fatalf("wait after the held probe (-want +got):\n%s", d)
	}
	for range 3 {
		e.clk.Advance(time.Minute)
		e.prober.next(t).reply <- nil
		e.clk.WaitTimers(t, 1)
	}
	if m := e.prober.maxActive.Load(); m != 1 {
		t.Fatalf("at most %d probes ran at once, want 1", m)
	}
}

// targetDone returns the done channel of ep's goroutine.
func targetDone(t *testing.T, c *Checker, ep *endpoint.Endpoint) <-chan struct{} {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	tg, ok := c.targets[ep]
	if !ok {
		t.Fatalf("%s is not checked", ep.Addr)
	}
	return tg.done
}

// probeAll replies to one probe of each of the endpoints named in results,
// in whatever order they arrive.
func probeAll(t *testing.T, p *fakeProber, results map[string]string) {
	t.Helper()
	left := len(results)
	for left > 0 {
		call := p.next(t)
		r, ok := results[call.addr]
		if !ok {
			t.Fatalf("unexpected probe of %s", call.addr)
		}
		delete(results, call.addr)
		call.reply <- result(r)
		left--
	}
}

func TestCheckerUpdate(t *testing.T) {
	e := newCheckerEnv(t, testConfig())
	a, b, c := endpoint.New("a:1"), endpoint.New("b:1"), endpoint.New("c:1")
	e.c.Update([]*endpoint.Endpoint{a, b})
	probeAll(t, e.prober, map[string]string{"a:1": "S", "b:1": "F"})
	e.clk.WaitTimers(t, 2)
	for range 2 {
		e.clk.Advance(testInterval)
		probeAll(t, e.prober, map[string]string{"a:1": "F", "b:1": "F"})
		e.clk.WaitTimers(t, 2)
	}
	// a has two failures behind it, one short of the threshold; b failed
	// its first probe.
	if !a.ActiveHealthy() || b.ActiveHealthy() {
		t.Fatalf("before reload: a %v b %v, want true false", a.ActiveHealthy(), b.ActiveHealthy())
	}
	e.changes.take()

	// A reload keeps a and b (and their goroutines) and adds c: only c is
	// probed at once, b stays down, a keeps its two failures.
	doneA := targetDone(t, e.c, a)
	e.c.Update([]*endpoint.Endpoint{c, b, a})
	if targetDone(t, e.c, a) != doneA {
		t.Fatal("a got a new goroutine")
	}
	probeAll(t, e.prober, map[string]string{"c:1": "S"})
	e.clk.WaitTimers(t, 3)
	if b.ActiveHealthy() {
		t.Fatal("reload reset b's verdict")
	}
	e.clk.Advance(testInterval)
	probeAll(t, e.prober, map[string]string{"a:1": "F", "b:1": "S", "c:1": "S"})
	e.clk.WaitTimers(t, 3)
	if a.ActiveHealthy() {
		t.Fatal("a's third failure did not count: the reload reset its counter")
	}
	if b.ActiveHealthy() {
		t.Fatal("b healthy after one success")
	}
	if d := cmp.Diff([]change{{"a:1", false}}, e.changes.take()); d != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", d)
	}
}

func TestCheckerRemoveEndsGoroutine(t *testing.T) {
	e := newCheckerEnv(t, testConfig())
	a, b := endpoint.New("a:1"), endpoint.New("b:1")
	e.c.Update([]*endpoint.Endpoint{a, b})
	probeAll(t, e.prober, map[string]string{"a:1": "F", "b:1": "S"})
	e.clk.WaitTimers(t, 2)
	e.clk.Advance(testInterval)
	// Hold a's probe, and b's too, then remove a while its probe hangs.
	calls := map[string]probeCall{}
	for range 2 {
		call := e.prober.next(t)
		calls[call.addr] = call
	}
	doneA := targetDone(t, e.c, a)
	e.changes.take()
	e.c.Update([]*endpoint.Endpoint{b})
	select {
	case <-doneA:
	default:
		t.Fatal("Update returned before a's goroutine ended")
	}
	if calls["a:1"].ctx.Err() == nil {
		t.Fatal("a's probe under way was not cancelled")
	}
	if !a.ActiveHealthy() {
		t.Fatal("a removed from checking but still marked unhealthy")
	}
	if d := cmp.Diff([]change{{"a:1", true}}, e.changes.take()); d != "" {
		t.Errorf("OnChange calls (-want +got):\n%s", d)
	}
	// b goes on; a is never probed again.
	calls["b:1"].reply <- nil
	e.clk.WaitTimers(t, 1)
	for range 2 {
		e.clk.Advance(testInterval)
		probeAll(t, e.prober, map[string]string{"b:1": "S"})
		e.clk.WaitTimers(t, 1)
	}
}

func TestCheckerStop(t *testing.T) {
	e := newCheckerEnv(t, testConfig())
	a, b := endpoint.New("a:1"), endpoint.New("b:1")
	e.c.Update([]*endpoint.Endpoint{a, b})
	probeAll(t, e.prober, map[string]string{"a:1": "F", "b:1": "S"})
	e.clk.WaitTimers(t, 2)
	doneA, doneB := targetDone(t, e.c, a), targetDone(t, e.c, b)
	e.c.Stop()
	for _, done := range []<-chan struct{}{doneA, doneB} {
		select {
		case <-done:
		default:
			t.Fatal("Stop returned before a goroutine ended")
		}
	}
	if !a.ActiveHealthy() {
		t.Fatal("a still unhealthy after Stop")
	}
	e.clk.WaitTimers(t, 0)
	// Update after Stop starts nothing.
	e.c.Update([]*endpoint.Endpoint{a})
	e.c.mu.Lock()
	n := len(e.c.targets)
	e.c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d endpoints checked after Stop", n)
	}
	e.c.Stop()
}

func TestCheckerReconfigure(t *testing.T) {
	e := newCheckerEnv(t, testConfig())
	a, b := endpoint.New("a:1"), endpoint.New("b:1")
	e.c.Update([]*endpoint.Endpoint{a, b})
	probeAll(t, e.prober, map[string]string{"a:1": "F", "b:1": "S"})
	e.clk.WaitTimers(t, 2)
	e.clk.Advance(testInterval)
	probeAll(t, e.prober, map[string]string{"a:1": "S", "b:1": "F"})
	e.clk.WaitTimers(t, 2)

	next := Config{Type: TypeHTTP, Interval: time.Minute, Timeout: testTimeout, HealthyThreshold: 3, UnhealthyThreshold: 2, Port: 9}
	e.c.Reconfigure(next)
	// The pending waits shrink to the new interval.
	e.clk.WaitFor(t, "two 1m waits", func(ds []time.Duration) bool {
		return slices.Equal(ds, []time.Duration{time.Minute, time.Minute})
	})
	if a.ActiveHealthy() || !b.ActiveHealthy() {
		t.Fatalf("Reconfigure changed verdicts: a %v b %v", a.ActiveHealthy(), b.ActiveHealthy())
	}
	e.clk.Advance(time.Minute)
	// The next probes use the new settings, and the counters carried over:
	// b's second failure reaches the new threshold 2, a's second success
	// does not reach the new threshold 3.
	for range 2 {
		call := e.prober.next(t)
		if call.cfg.Type != TypeHTTP || call.cfg.HTTPPath != "/" {
			t.Errorf("probe of %s used type %q path %q, want HTTP /", call.addr, call.cfg.Type, call.cfg.HTTPPath)
		}
		switch call.addr {
		case "a:9":
			call.reply <- nil
		case "b:9":
			call.reply <- errProbe
		default:
			t.Fatalf("probe of %s, want a:9 or b:9 (port override)", call.addr)
		}
	}
	e.clk.WaitTimers(t, 2)
	if a.ActiveHealthy() || b.ActiveHealthy() {
		t.Fatalf("after reconfigure: a %v b %v, want both unhealthy", a.ActiveHealthy(), b.ActiveHealthy())
	}
	e.clk.Advance(time.Minute)
	probeAll(t, e.prober, map[string]string{"a:9": "S", "b:9": "S"})
	e.clk.WaitTimers(t, 2)
	if !a.ActiveHealthy() {
		t.Fatal("a not healthy after its third success")
	}
}

func TestProbeAddr(t *testing.T) {
	tests := []struct {
		addr string
		port uint32
		want string
	}{
		{"10.0.0.1:80", 0, "10.0.0.1:80"},
		{"10.0.0.1:80", 8080, "10.0.0.1:8080"},
		{"[fd00::1]:80", 9000, "[fd00::1]:9000"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			got, err := probeAddr(tc.addr, tc.port)
			if err != nil || got != tc.want {
				t.Fatalf("probeAddr(%q, %d) = %q, %v; want %q", tc.addr, tc.port, got, err, tc.want)
			}
		})
	}
	if _, err := probeAddr("no-port", 1); err == nil {
		t.Fatal("probeAddr accepted an address without a port")
	}
}
