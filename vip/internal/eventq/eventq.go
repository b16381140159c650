// Package eventq is an unbounded, ordered hand-over of events from a
// producer that must never wait (a protocol's event loop, a stream reader)
// to one consumer goroutine that reads a channel.
package eventq

import "sync"

// Queue delivers pushed values on Out in order. Values wait in memory
// without bound while the reader is slow, so the consumer must keep
// reading or End the queue.
type Queue[T any] struct {
	out  chan T
	wake chan struct{}
	stop chan struct{}
	once sync.Once

	mu    sync.Mutex
	items []T
}

// New starts a queue.
func New[T any]() *Queue[T] {
	q := &Queue[T]{out: make(chan T), wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go q.deliver()
	return q
}

// Out is the consumer's channel; it closes after End.
func (q *Queue[T]) Out() <-chan T { return q.out }

// Push queues v; it never blocks.
func (q *Queue[T]) Push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// End stops delivery (values still queued are dropped) and closes Out.
// Safe to call more than once.
func (q *Queue[T]) End() { q.once.Do(func() { close(q.stop) }) }

func (q *Queue[T]) deliver() {
	defer close(q.out)
	for {
		q.mu.Lock()
		var v T
		have := len(q.items) > 0
		if have {
			v, q.items = q.items[0], q.items[1:]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		select {
		case q.out <- v:
		case <-q.stop:
			return
		}
	}
}

// Fanout hands every published value to each subscriber, in order, through
// a Queue of its own. The zero value is ready; safe for concurrent use.
type Fanout[T any] struct {
	mu     sync.Mutex
	subs   map[*Queue[T]]struct{}
	closed bool
}

// Subscribe returns the values published from now on and a function that
// ends the subscription and closes the channel. After Close the channel is
// closed at once.
func (f *Fanout[T]) Subscribe() (<-chan T, func()) {
	q := New[T]()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		q.End()
		return q.Out(), func() {}
	}
	if f.subs == nil {
		f.subs = map[*Queue[T]]struct{}{}
	}
	f.subs[q] = struct{}{}
	return q.Out(), func() {
		f.mu.Lock()
		delete(f.subs, q)
		f.mu.Unlock()
		q.End()
	}
}

// Publish queues v for every subscriber; it never blocks.
func (f *Fanout[T]) Publish(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for q := range f.subs {
		q.Push(v)
	}
}

// Close ends every subscription.
func (f *Fanout[T]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for q := range f.subs {
		q.End()
	}
	f.subs = nil
}
