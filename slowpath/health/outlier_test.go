package health

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

const base = 30 * time.Second

type outlierEnv struct {
	clk     *fakeClock
	changes *changeLog
	o       *Outlier
	eps     []*endpoint.Endpoint
}

func newOutlierEnv(cfg OutlierConfig, n int) *outlierEnv {
	e := &outlierEnv{clk: newFakeClock(), changes: &changeLog{}}
	e.o = NewOutlier(cfg, Options{Clock: e.clk, OnChange: e.changes.record})
	for i := range n {
		e.eps = append(e.eps, endpoint.New(fmt.Sprintf("10.0.0.%d:80", i+1)))
	}
	e.o.Update(e.eps)
	return e
}

// fail reports k failures at ep, one per step of time.
func (e *outlierEnv) fail(ep *endpoint.Endpoint, k int, step time.Duration) {
	for i := range k {
		if i > 0 {
			e.clk.Advance(step)
		}
		e.o.Report(ep, Failure5xx)
	}
}

// ejectedFor returns how long ep is still ejected (0: not ejected).
func (e *outlierEnv) ejectedFor(ep *endpoint.Endpoint) time.Duration {
	now := e.clk.Now()
	if !ep.Ejected(now) {
		return 0
	}
	return ep.EjectedUntil().Sub(now)
}

func TestOutlierEjection(t *testing.T) {
	cfg := OutlierConfig{ConsecutiveFailures: 3, BaseEjectionTime: base, MaxEjectionTime: 70 * time.Second, MaxEjectionPercent: 100}
	e := newOutlierEnv(cfg, 2)
	ep := e.eps[0]

	// Two failures do not eject; the third does, for the base time.
	e.fail(ep, 2, 0)
	if e.ejectedFor(ep) != 0 {
		t.Fatal("ejected after 2 of 3 failures")
	}
	e.fail(ep, 1, 0)
	if got := e.ejectedFor(ep); got != base {
		t.Fatalf("first ejection %v, want %v", got, base)
	}
	// Outcomes while ejected (requests already under way) do not count.
	e.fail(ep, 5, 0)
	if got := e.ejectedFor(ep); got != base {
		t.Fatalf("failures while ejected changed the ejection to %v", got)
	}
	// It comes back by itself when the time is up, from zero failures.
	e.clk.Advance(base)
	if ep.Ejected(e.clk.Now()) {
		t.Fatal("still ejected after the base time")
	}
	e.fail(ep, 2, 0)
	if e.ejectedFor(ep) != 0 {
		t.Fatal("ejected again after 2 failures: the counter was not reset")
	}
	// The second ejection lasts twice the base, the third is capped.
	e.fail(ep, 1, 0)
	if got := e.ejectedFor(ep); got != 2*base {
		t.Fatalf("second ejection %v, want %v", got, 2*base)
	}
	e.clk.Advance(2 * base)
	e.fail(ep, 3, 0)
	if got := e.ejectedFor(ep); got != 70*time.Second {
		t.Fatalf("third ejection %v, want the 70s cap", got)
	}
	// The end of an ejection is reported at the next Report.
	e.clk.Advance(70 * time.Second)
	e.o.Report(ep, Success)
	want := []change{
		{ep.Addr, false}, {ep.Addr, true},
		{ep.Addr, false}, {ep.Addr, true},
		{ep.Addr, false}, {ep.Addr, true},
	}
	if d := cmp.Diff(want, e.changes.take()); d != "" {
		t.Fatalf("OnChange calls (-want +got):\n%s", d)
	}
	if e.ejectedFor(e.eps[1]) != 0 {
		t.Fatal("the other endpoint was ejected")
	}
}

func TestOutlierCounting(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		reports  []Result
		step     time.Duration // time between reports
		ejected  bool
	}{
		{"consecutive failures eject", 0, []Result{Failure5xx, GatewayError, ConnectFailure}, time.Second, true},
		{"every failure kind counts", 0, []Result{Timeout, Reset, Failure5xx}, time.Second, true},
		{"a success resets the count", 0, []Result{Failure5xx, Failure5xx, Success, Failure5xx, Failure5xx}, time.Second, false},
		{"three after a success eject", 0, []Result{Failure5xx, Success, Failure5xx, Failure5xx, Failure5xx}, time.Second, true},
		{"no window: spread failures eject", 0, []Result{Failure5xx, Failure5xx, Failure5xx}, time.Hour, true},
		{"within the window", 10 * time.Second, []Result{Failure5xx, Failure5xx, Failure5xx}, 5 * time.Second, true},
		{"spread over more than the window", 10 * time.Second, []Result{Failure5xx, Failure5xx, Failure5xx}, 6 * time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 3, Interval: tc.interval, MaxEjectionPercent: 100}, 1)
			ep := e.eps[0]
			for i, r := range tc.reports {
				if i > 0 {
					e.clk.Advance(tc.step)
				}
				e.o.Report(ep, r)
			}
			if got := ep.Ejected(e.clk.Now()); got != tc.ejected {
				t.Fatalf("ejected %v, want %v", got, tc.ejected)
			}
		})
	}
	t.Run("sliding window", func(t *testing.T) {
		e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 3, Interval: 10 * time.Second}, 1)
		ep := e.eps[0]
		e.fail(ep, 3, 6*time.Second) // at 0, 6, 12
		if ep.Ejected(e.clk.Now()) {
			t.Fatal("ejected by failures spread over 12s")
		}
		e.clk.Advance(time.Second)
		e.o.Report(ep, Failure5xx) // 6, 12, 13
		if !ep.Ejected(e.clk.Now()) {
			t.Fatal("not ejected by three failures within 7s")
		}
	})
}

func TestOutlierDecay(t *testing.T) {
	tests := []struct {
		name    string
		healthy time.Duration // time back in service before the next ejection
		want    time.Duration
	}{
		{"no decay within a base period", base - time.Second, 2 * base},
		{"one decay after a base period", base, base},
		{"no lower than one base", 5 * base, base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 1, BaseEjectionTime: base}, 1)
			ep := e.eps[0]
			e.fail(ep, 1, 0)
			e.clk.Advance(base)
			e.clk.Advance(tc.healthy)
			e.fail(ep, 1, 0)
			if got := e.ejectedFor(ep); got != tc.want {
				t.Fatalf("second ejection %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("two ejections decay one period at a time", func(t *testing.T) {
		e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 1, BaseEjectionTime: base}, 1)
		ep := e.eps[0]
		e.fail(ep, 1, 0) // 1×base
		e.clk.Advance(base)
		e.fail(ep, 1, 0) // 2×base
		e.clk.Advance(2*base + base)
		// One period back: the count is 1, so the next is 2×base.
		e.fail(ep, 1, 0)
		if got := e.ejectedFor(ep); got != 2*base {
			t.Fatalf("third ejection %v, want %v", got, 2*base)
		}
	})
}

func TestOutlierMaxEjectionPercent(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		percent int
		limit   int
	}{
		{"10 endpoints at 10%", 10, 10, 1},
		{"5 endpoints at 10%: still one", 5, 10, 1},
		{"10 endpoints at 35%", 10, 35, 3},
		{"4 endpoints at 100%", 4, 100, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 2, BaseEjectionTime: base, MaxEjectionPercent: tc.percent}, tc.n)
			for _, ep := range e.eps {
				e.fail(ep, 2, 0)
			}
			ejected := 0
			for i, ep := range e.eps {
				if ep.Ejected(e.clk.Now()) {
					ejected++
					if i >= tc.limit {
						t.Errorf("%s ejected beyond the first %d", ep.Addr, tc.limit)
					}
				}
			}
			if ejected != tc.limit {
				t.Fatalf("%d ejected, want %d", ejected, tc.limit)
			}
		})
	}
	t.Run("a slot frees when an ejection ends", func(t *testing.T) {
		e := newOutlierEnv(OutlierConfig{ConsecutiveFailures: 2, BaseEjectionTime: base}, 10)
		a, b := e.eps[0], e.eps[1]
		e.fail(a, 2, 0)
		e.fail(b, 2, 0)
		if !a.Ejected(e.clk.Now()) || b.Ejected(e.clk.Now()) {
			t.Fatal("want a ejected and b not")
		}
		// b's denied trip started its count again: one more failure is
		// not enough once a slot is free.
		e.clk.Advance(base)
		e.fail(b, 1, 0)
		if b.Ejected(e.clk.Now()) {
			t.Fatal("b ejected on its first failure after the denial")
		}
		e.fail(b, 1, 0)
		if !b.Ejected(e.clk.Now()) {
			t.Fatal("b not ejected once a's ejection ended")
		}
	})
}

func TestOutlierUpdateAndReconfigure(t *testing.T) {
	cfg := OutlierConfig{ConsecutiveFailures: 3, BaseEjectionTime: base, MaxEjectionPercent: 100}
	e := newOutlierEnv(cfg, 3)
	a, b, c := e.eps[0], e.eps[1], e.eps[2]
	e.fail(a, 3, 0) // ejected
	e.fail(b, 2, 0) // one short
	e.fail(c, 3, 0) // ejected
	e.changes.take()

	// A reload keeps a's ejection and b's count, drops (and unejects) c,
	// and adds d, unknown before.
	d := endpoint.New("10.0.0.9:80")
	e.o.Update([]*endpoint.Endpoint{b, a, d})
	if e.ejectedFor(a) != base {
		t.Fatal("reload ended a's ejection")
	}
	if c.Ejected(e.clk.Now()) {
		t.Fatal("removed endpoint still ejected")
	}
	e.fail(b, 1, 0)
	if !b.Ejected(e.clk.Now()) {
		t.Fatal("b's third failure did not eject: the reload reset its count")
	}
	e.o.Report(c, Failure5xx) // unknown now: ignored
	if d := cmp.Diff([]change{{c.Addr, true}, {b.Addr, false}}, e.changes.take()); d != "" {
		t.Fatalf("OnChange calls (-want +got):\n%s", d)
	}

	// Reconfigure keeps ejections and their count.
	e.o.Reconfigure(OutlierConfig{ConsecutiveFailures: 1, BaseEjectionTime: base, MaxEjectionPercent: 100})
	if e.ejectedFor(a) != base || e.ejectedFor(b) != base {
		t.Fatal("Reconfigure ended ejections")
	}
	e.clk.Advance(base)
	e.fail(a, 1, 0)
	if got := e.ejectedFor(a); got != 2*base {
		t.Fatalf("a's second ejection after Reconfigure %v, want %v", got, 2*base)
	}
	// Disabling unejects everything and ignores reports.
	e.o.Reconfigure(OutlierConfig{})
	if a.Ejected(e.clk.Now()) {
		t.Fatal("a still ejected with detection disabled")
	}
	e.fail(d, 10, 0)
	if d.Ejected(e.clk.Now()) {
		t.Fatal("ejected with detection disabled")
	}
}

func TestOutlierReportAllocs(t *testing.T) {
	for _, clk := range []Clock{SystemClock{}, newFakeClock()} {
		t.Run(fmt.Sprintf("%T", clk), func(t *testing.T) {
			o := NewOutlier(OutlierConfig{ConsecutiveFailures: 5, Interval: time.Minute}, Options{Clock: clk})
			ep, ejected, unknown := endpoint.New("a:1"), endpoint.New("b:1"), endpoint.New("x:1")
			o.Update([]*endpoint.Endpoint{ep, ejected, endpoint.New("c:1")})
			for range 5 {
				o.Report(ejected, Failure5xx)
			}
			if !ejected.Ejected(clk.Now()) {
				t.Fatal("setup: b not ejected")
			}
			allocs := testing.AllocsPerRun(1000, func() {
				o.Report(ep, Failure5xx)
				o.Report(ep, GatewayError)
				o.Report(ep, Success)
				o.Report(ejected, Failure5xx)
				o.Report(unknown, Failure5xx)
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per run, want 0", allocs)
			}
		})
	}
}

func TestOutlierConcurrentReports(t *testing.T) {
	clk := newFakeClock()
	o := NewOutlier(OutlierConfig{ConsecutiveFailures: 3, BaseEjectionTime: base, MaxEjectionPercent: 10}, Options{Clock: clk})
	var eps []*endpoint.Endpoint
	for i := range 10 {
		eps = append(eps, endpoint.New(fmt.Sprintf("10.0.0.%d:80", i)))
	}
	o.Update(eps)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				ep := eps[(g+i)%len(eps)]
				r := Failure5xx
				if i%7 == 0 {
					r = Success
				}
				o.Report(ep, r)
			}
		})
	}
	// Reloads race with the reports, keeping the same endpoints.
	wg.Go(func() {
		for range 50 {
			o.Update(eps)
			o.Reconfigure(OutlierConfig{ConsecutiveFailures: 3, BaseEjectionTime: base, MaxEjectionPercent: 10})
		}
	})
	wg.Wait()
	ejected := 0
	for _, ep := range eps {
		if ep.Ejected(clk.Now()) {
			ejected++
		}
	}
	// Failures dominate, so one is ejected; the cap keeps it to one.
	if ejected != 1 {
		t.Fatalf("%d ejected, want exactly 1 (10%% of 10)", ejected)
	}
}
