package health

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only by Advance; timers fire when it
// passes their deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

type fakeTimer struct {
	clk  *fakeClock
	c    chan time.Time
	when time.Time
	d    time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_000_000, 0), changed: make(chan struct{})}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clk: f, c: make(chan time.Time, 1), when: f.now.Add(d), d: d}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.notify()
	return t
}

func (f *fakeClock) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.timers, t)
	if i < 0 {
		return false
	}
	f.timers = slices.Delete(f.timers, i, i+1)
	f.notify()
	return true
}

// Advance moves time forward and fires the timers now due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.timers = slices.DeleteFunc(f.timers, func(t *fakeTimer) bool {
		if t.when.After(f.now) {
			return false
		}
		t.c <- f.now
		return true
	})
	f.notify()
}

// WaitTimers blocks until exactly n timers are pending and returns their
// durations.
func (f *fakeClock) WaitTimers(t *testing.T, n int) []time.Duration {
	t.Helper()
	return f.WaitFor(t, fmt.Sprintf("%d pending timers", n), func(ds []time.Duration) bool { return len(ds) == n })
}

// WaitFor blocks until the durations of the pending timers satisfy ok. The
// deadline only keeps a broken test from hanging; it is no part of what is
// tested.
func (f *fakeClock) WaitFor(t *testing.T, what string, ok func([]time.Duration) bool) []time.Duration {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		ds := []time.Duration{}
		for _, tm := range f.timers {
			ds = append(ds, tm.d)
		}
		ch := f.changed
		f.mu.Unlock()
		if ok(ds) {
			return ds
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("waited for %s; pending timers: %v", what, ds)
		}
	}
}
