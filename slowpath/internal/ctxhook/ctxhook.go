// Package ctxhook lets the owner of a context run a function when it ends
// at the cost of two atomic operations, where context.AfterFunc allocates
// and registers a child context (a map insert and delete in the parent):
// the upstream client watches every request's context that way, which was
// 3 % of the agent's CPU under small HTTP/1.1 requests. A server that
// cancels its contexts itself (the HTTP/1.x server's connection contexts)
// puts a Hook in them; a context without one falls back to AfterFunc.
//
// A Slot may also hold its owner's function that cancels the context with
// a cause (CancelFunc): the proxy ends a request idle for too long through
// it instead of deriving a cancelable context per request.
package ctxhook

import (
	"context"
	"sync/atomic"
)

// Hook runs one function when the context it belongs to ends.
type Hook interface {
	// Context is the context whose end runs the function: a context
	// derived from it that can end on its own is not served (see Of).
	Context() context.Context
	// Watch arranges for f to run once the context ends (at once, on
	// another goroutine, if it has). One watch at a time.
	Watch(f func())
	// Unwatch ends the watch. False means f ran or is running.
	Unwatch() bool
}

type key struct{}

// With returns ctx carrying h; h.Context() must be the returned context.
func With(ctx context.Context, h Hook) context.Context { return context.WithValue(ctx, key{}, h) }

// Of returns the Hook that ends with ctx, if there is one: ctx is the
// hook's context or one derived from it that only carries values
// (context.WithValue, httptrace.WithClientTrace), which ends with it (one
// Done channel), not one that can end on its own.
func Of(ctx context.Context) (Hook, bool) {
	h, ok := ctx.Value(key{}).(Hook)
	if !ok {
		return nil, false
	}
	// The hook's own context, as nearly always, needs no Done channel
	// compared (asking a cancelCtx for it makes one: an allocation per
	// HTTP/2 request). own is a pointer, so == cannot panic.
	if own := h.Context(); own != ctx && own.Done() != ctx.Done() {
		return nil, false
	}
	return h, true
}

// CancelFunc returns the function that cancels ctx with a cause (and
// runs what its hook watches), if ctx ends with a Slot whose owner gave
// one: ctx is then the slot's context or carries only values more.
func CancelFunc(ctx context.Context) (func(cause error), bool) {
	h, ok := Of(ctx)
	if !ok {
		return nil, false
	}
	s, ok := h.(*Slot)
	if !ok || s.cancel == nil {
		return nil, false
	}
	return s.cancel, true
}

// Slot implements Hook for a context its owner cancels, calling Fire
// after each cancel.
type Slot struct {
	ctx    context.Context
	cancel func(cause error)
	state  atomic.Int32 // slotIdle, slotArmed, slotFired
	fn     func()
}

const (
	slotIdle int32 = iota
	slotArmed
	slotFired
)

// Init sets the context the slot belongs to, readying a slot used before
// (for a context that ended) for a new one. cancel, if not nil, cancels
// ctx with a cause and then calls Fire; CancelFunc hands it out, so it
// must not be called once the owner reuses the slot.
func (s *Slot) Init(ctx context.Context, cancel func(cause error)) {
	s.ctx, s.cancel, s.fn = ctx, cancel, nil
	s.state.Store(slotIdle)
}

// Context implements Hook.
func (s *Slot) Context() context.Context { return s.ctx }

// Watch implements Hook.
func (s *Slot) Watch(f func()) {
	if s.state.Load() == slotFired {
		go f()
		return
	}
	s.fn = f
	if !s.state.CompareAndSwap(slotIdle, slotArmed) {
		// Fired just now: the context has ended.
		go f()
		return
	}
	if s.ctx.Err() != nil {
		// Canceled before the watch was armed: Fire may have missed it.
		s.Fire()
	}
}

// Unwatch implements Hook.
func (s *Slot) Unwatch() bool {
	if s.state.CompareAndSwap(slotArmed, slotIdle) {
		s.fn = nil
		return true
	}
	return s.state.Load() == slotIdle
}

// Fire runs the watched function, if any and not yet run; call it after
// canceling the context. Later watches run at once.
func (s *Slot) Fire() {
	for {
		switch s.state.Load() {
		case slotArmed:
			if s.state.CompareAndSwap(slotArmed, slotFired) {
				f := s.fn
				f()
				return
			}
		case slotIdle:
			if s.state.CompareAndSwap(slotIdle, slotFired) {
				return
			}
		default:
			return
		}
	}
}
