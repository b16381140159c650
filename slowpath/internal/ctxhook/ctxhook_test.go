package ctxhook

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// owned is a context whose owner cancels it and fires its slot, as the
// HTTP/1.x server does.
type owned struct {
	ctx    context.Context
	cancel context.CancelFunc
	slot   Slot
}

func newOwned() *owned {
	o := new(owned)
	ctx, cancel := context.WithCancel(context.Background())
	o.ctx = With(ctx, &o.slot)
	o.slot.Init(o.ctx, nil)
	o.cancel = func() { cancel(); o.slot.Fire() }
	return o
}

func waitRan(t *testing.T, ran *atomic.Int32, want int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("watched function ran %d times, want %d", ran.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		// steps, in order: "watch", "unwatch=true|false", "cancel"
		steps []string
		ran   int32
	}{
		{"cancel runs the watch", []string{"watch", "cancel", "unwatch=false"}, 1},
		{"unwatch before cancel", []string{"watch", "unwatch=true", "cancel"}, 0},
		{"watch after cancel runs at once", []string{"cancel", "watch", "unwatch=false"}, 1},
		{"rewatch after unwatch", []string{"watch", "unwatch=true", "watch", "cancel", "unwatch=false"}, 1},
		{"unwatch without watch", []string{"unwatch=true", "cancel", "unwatch=false"}, 0},
		{"second cancel runs nothing", []string{"watch", "cancel", "cancel"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwned()
			var ran atomic.Int32
			for _, s := range tc.steps {
				switch s {
				case "watch":
					o.slot.Watch(func() { ran.Add(1) })
				case "cancel":
					o.cancel()
				case "unwatch=true", "unwatch=false":
					if got := o.slot.Unwatch(); got != (s == "unwatch=true") {
						t.Fatalf("%s: Unwatch() = %v", s, got)
					}
				}
			}
			waitRan(t, &ran, tc.ran)
			time.Sleep(10 * time.Millisecond)
			if n := ran.Load(); n != tc.ran {
				t.Fatalf("watched function ran %d times, want %d", n, tc.ran)
			}
		})
	}
}

// TestCanceledBeforeFire: a watch armed after the context was canceled
// but before its owner fired still runs (once).
func TestCanceledBeforeFire(t *testing.T) {
	var s Slot
	ctx, cancel := context.WithCancel(context.Background())
	s.Init(ctx, nil)
	cancel()
	var ran atomic.Int32
	s.Watch(func() { ran.Add(1) })
	s.Fire()
	waitRan(t, &ran, 1)
}

func TestOf(t *testing.T) {
	o := newOwned()
	if h, ok := Of(o.ctx); !ok || h != Hook(&o.slot) {
		t.Fatal("Of does not find the hook of its own context")
	}
	child, cancel := context.WithCancel(o.ctx)
	defer cancel()
	if _, ok := Of(child); ok {
		t.Fatal("Of returned the parent's hook for a derived context, which can end on its own")
	}
	type k struct{}
	if h, ok := Of(context.WithValue(o.ctx, k{}, 1)); !ok || h != Hook(&o.slot) {
		t.Fatal("Of does not find the hook through a context that only adds a value")
	}
	if _, ok := Of(context.WithoutCancel(o.ctx)); ok {
		t.Fatal("Of returned a hook for a context that never ends")
	}
	if _, ok := Of(context.Background()); ok {
		t.Fatal("Of found a hook in a context without one")
	}
}

// TestRace: cancel racing watch and unwatch runs each watch at most once,
// and exactly once when Unwatch says it ran.
func TestRace(t *testing.T) {
	for range 2000 {
		o := newOwned()
		var ran atomic.Int32
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); o.cancel() }()
		o.slot.Watch(func() { ran.Add(1) })
		stopped := o.slot.Unwatch()
		wg.Wait()
		if stopped {
			if ran.Load() != 0 {
				t.Fatal("Unwatch reported the function stopped, but it ran")
			}
			continue
		}
		waitRan(t, &ran, 1)
	}
}

// TestCancelFunc: the owner's cancel function is found through the slot's
// context and contexts that only add values, cancels with the cause and
// runs the watch; a slot without one, or a context that can end on its
// own, gives none.
func TestCancelFunc(t *testing.T) {
	var s Slot
	ctx, cancel := context.WithCancelCause(context.Background())
	ctx = With(ctx, &s)
	s.Init(ctx, func(cause error) { cancel(cause); s.Fire() })
	type k struct{}
	if _, ok := CancelFunc(context.WithValue(context.Background(), k{}, 1)); ok {
		t.Fatal("CancelFunc found one in a context without a slot")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if _, ok := CancelFunc(child); ok {
		t.Fatal("CancelFunc returned the slot's for a context that can end on its own")
	}
	if _, ok := CancelFunc(newOwned().ctx); ok {
		t.Fatal("CancelFunc returned one for a slot initialised without")
	}
	f, ok := CancelFunc(context.WithValue(ctx, k{}, 1))
	if !ok {
		t.Fatal("CancelFunc does not find the owner's function through a context that only adds a value")
	}
	var ran atomic.Int32
	s.Watch(func() { ran.Add(1) })
	errIdle := errors.New("idle")
	f(errIdle)
	if got := context.Cause(ctx); !errors.Is(got, errIdle) {
		t.Fatalf("cause after the cancel = %v, want %v", got, errIdle)
	}
	waitRan(t, &ran, 1)
}
