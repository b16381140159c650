package slowpath

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// idleWatch cancels the exchange when no activity was seen for d.
// Activity costs an atomic store. A short timeout has a timer of its own
// that re-arms itself for the time left instead of being reset on every
// byte; a long one (every route gets an hour by default) is checked by
// the shared sweeper, since a timer made and stopped per request was 3 %
// of the agent's CPU under small requests (perf/httpbench profile).
//
// Once stop returns, cancel is not called (and a cancel under way has
// finished): cancel may be the function of a context its server reuses
// for the next request (ctxhook.CancelFunc).
type idleWatch struct {
	d      time.Duration
	last   atomic.Int64 // Unix nanoseconds of the last activity
	state  atomic.Int32 // watchActive, watchStopped, watchFiring, watchFired
	timer  *time.Timer  // nil: swept
	cancel context.CancelCauseFunc

	// In idleSweep's list, under its mutex.
	prev, next *idleWatch
	listed     bool
}

var (
	// idleSweepFrom is the shortest timeout the sweeper checks, which it
	// ends up to idleSweepEvery late (10 % at most); shorter ones get a
	// timer. Variables for tests.
	idleSweepFrom  = 10 * time.Second
	idleSweepEvery = time.Second
)

// newIdleWatch cancels with errIdleTimeout when idle for d.
func newIdleWatch(d time.Duration, cancel context.CancelCauseFunc) *idleWatch {
	w := &idleWatch{d: d, cancel: cancel}
	w.last.Store(time.Now().UnixNano())
	if d < idleSweepFrom {
		w.timer = time.AfterFunc(d, w.check)
	} else {
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
	if w != nil {
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
		go s.run()
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

func (s *idleSweeper) run() {
	t := time.NewTicker(idleSweepEvery)
	defer t.Stop()
	var expired []*idleWatch
	for range t.C {
		now := time.Now().UnixNano()
		s.mu.Lock()
		for w := s.head.next; w != &s.head; {
			next := w.next
			if time.Duration(now-w.last.Load()) >= w.d {
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
