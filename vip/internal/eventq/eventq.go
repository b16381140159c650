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
