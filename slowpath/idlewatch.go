package slowpath

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// idleWatch cancels the exchange when no activity was seen for d.
// A short timeout has a timer of its own that re-arms itself for the time
// left instead of being reset on every byte; activity stores the time. A
// long one (every route gets an hour by default) is checked by the shared
// sweeper, since a timer made and stopped per request was 3 % of the
// agent's CPU under small requests (perf/httpbench profile); activity
// then only sets a flag, and the sweeper, seeing it, takes its own tick
// as the time of the activity. Reading the clock at a watch's start and
// on activity was 1.5 % of the agent's CPU (time.Now is two vDSO calls).
//
// Once stop returns, cancel is not called (and a cancel under way has
// finished): cancel may be the function of a context its server reuses
// for the next request (ctxhook.CancelFunc).
type idleWatch struct {
	d time.Duration
	// last is the Unix nanoseconds of the last activity (with a timer), or
	// of the sweep that saw the last activity (swept).
	last   atomic.Int64
	state  atomic.Int32 // watchActive, watchStopped, watchFiring, watchFired
	timer  *time.Timer  // nil: swept
	cancel context.CancelCauseFunc
	// active (swept): activity since the last sweep.
	active atomic.Bool

	// In idleSweep's list, under its mutex.
	prev, next *idleWatch
	listed     bool
}

var (
	// idleSweepFrom is the shortest timeout the sweeper checks, which it
	// ends up to two idleSweepEvery late (10 % at most: the activity's
	// time is known to a sweep); shorter ones get a timer. Variables for
	// tests.
	idleSweepFrom  = 10 * time.Second
	idleSweepEvery = 500 * time.Millisecond
)

// newIdleWatch cancels with errIdleTimeout when idle for d.
func newIdleWatch(d time.Duration, cancel context.CancelCauseFunc) *idleWatch {
	w := &idleWatch{d: d, cancel: cancel}
	if d < idleSweepFrom {
		w.last.Store(time.Now().UnixNano())
		w.timer = time.AfterFunc(d, w.check)
	} else {
		w.active.Store(true) // the start is activity
		idleSweep.add(w)
	}
	return w
}

const (
	watchActive int32 = iota
	watchStopped
	watchFiring
	watchFired
)

func (w *idleWatch) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.d {
		w.fire()
		return
	}
	w.timer.Reset(w.d - idle)
}

// fire cancels, unless stop came first.
func (w *idleWatch) fire() {
	if w.state.CompareAndSwap(watchActive, watchFiring) {
		w.cancel(errIdleTimeout)
		w.state.Store(watchFired)
	}
}

// touch records activity; a nil watch ignores it.
func (w *idleWatch) touch() {
	switch {
	case w == nil:
	case w.timer == nil:
		if !w.active.Load() { // no store (and cache line taken) when set
			w.active.Store(true)
		}
	default:
		w.last.Store(time.Now().UnixNano())
	}
}

func (w *idleWatch) stop() {
	if w == nil {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	} else {
		idleSweep.remove(w)
	}
	if w.state.CompareAndSwap(watchActive, watchStopped) {
		return
	}
	// Firing now: a cancel is short (a context and a connection close).
	for w.state.Load() == watchFiring {
		runtime.Gosched()
	}
}

// idleSweeper checks the listed watches every idleSweepEvery; its
// goroutine runs while any are listed.
type idleSweeper struct {
	mu      sync.Mutex
	head    idleWatch // sentinel of a circular list
	running bool
}

var idleSweep idleSweeper

func (s *idleSweeper) add(w *idleWatch) {
	s.mu.Lock()
	if s.head.next == nil {
		s.head.next, s.head.prev = &s.head, &s.head
	}
	w.prev, w.next = s.head.prev, &s.head
	s.head.prev.next = w
	s.head.prev = w
	w.listed = true
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.run(idleSweepEvery) // read here: tests change it between tests
	}
}

func (s *idleSweeper) remove(w *idleWatch) {
	s.mu.Lock()
	s.unlink(w)
	s.mu.Unlock()
}

// unlink takes w out of the list; s.mu is held.
func (s *idleSweeper) unlink(w *idleWatch) {
	if !w.listed {
		return
	}
	w.prev.next, w.next.prev = w.next, w.prev
	w.prev, w.next, w.listed = nil, nil, false
}

func (s *idleSweeper) run(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var expired []*idleWatch
	for range t.C {
		s.mu.Lock()
		// Read under the lock: an earlier reading could predate activity
		// flagged while the sweeper waited for it.
		now := time.Now().UnixNano()
		for w := s.head.next; w != &s.head; {
			next := w.next
			if w.active.Swap(false) {
				// Activity since the last sweep, at most idleSweepEvery
				// ago. It is stamped with a clock read after the swap, so
				// never earlier than the activity (which may have come
				// while the list was walked): the watch never fires early.
				w.last.Store(time.Now().UnixNano())
			} else if time.Duration(now-w.last.Load()) >= w.d {
				s.unlink(w)
				expired = append(expired, w)
			}
			w = next
		}
		idle := s.head.next == &s.head
		if idle {
			s.running = false
		}
		s.mu.Unlock()
		for i, w := range expired {
			w.fire()
			expired[i] = nil
		}
		expired = expired[:0]
		if idle {
			return
		}
	}
}
