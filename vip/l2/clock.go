package l2

import "time"

// Clock is the time source of an [Announcer]: the lease is checked against
// Now, and the repeated announcements wait on its timers. Tests pass a clock
// they step by hand, so that lease expiry and the schedule are exact.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that delivers on its channel once d has
	// passed; d <= 0 delivers at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a [Clock], with the semantics of *time.Timer
// since Go 1.23: after Stop or Reset returns, no stale value is received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// systemClock is the wall clock with its monotonic reading, so that a lease
// survives wall-clock steps unchanged.
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
