package bfd

import "time"

// Clock is the time source of a [Speaker]. Tests pass a clock they step by
// hand, so that detection timeouts and transmission schedules are exact.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that delivers on its channel once d has
	// passed; d <= 0 delivers at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a [Clock], with the semantics of *time.Timer
// since Go 1.23: after Stop or ResetAt returns, no stale value is received.
// It is set to an instant rather than a duration so that time moving
// between reading the clock and setting the timer cannot push a deadline
// back (a stepped clock moves in large steps).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	// ResetAt sets the timer to deliver at t; a t not after the clock's
	// present delivers at once.
	ResetAt(t time.Time) bool
}

// systemClock is the wall clock (with its monotonic reading).
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time       { return t.t.C }
func (t systemTimer) Stop() bool                { return t.t.Stop() }
func (t systemTimer) ResetAt(at time.Time) bool { return t.t.Reset(time.Until(at)) }
