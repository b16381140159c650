package eventq

import (
	"testing"
	"time"
)

// TestOrderWithoutBlocking: pushes never wait for the reader, and the
// reader gets every value in order.
func TestOrderWithoutBlocking(t *testing.T) {
	q := New[int]()
	const n = 10000
	for i := range n {
		q.Push(i) // nobody reads yet: must not block
	}
	for i := range n {
		select {
		case v := <-q.Out():
			if v != i {
				t.Fatalf("value %d: got %d", i, v)
			}
		case <-time.After(time.Minute):
			t.Fatalf("value %d never delivered", i)
		}
	}
	q.End()
	q.End()
	if _, ok := <-q.Out(); ok {
		t.Fatal("Out still open after End")
	}
}

// TestFanout: each subscriber gets every value published while it is
// subscribed, in order; Close ends them all and later subscriptions.
func TestFanout(t *testing.T) {
	var f Fanout[int]
	a, stopA := f.Subscribe()
	b, _ := f.Subscribe()
	f.Publish(1)
	stopA()
	f.Publish(2)
	if v := <-b; v != 1 {
		t.Fatalf("b got %d first, want 1", v)
	}
	if v := <-b; v != 2 {
		t.Fatalf("b got %d second, want 2", v)
	}
	for v := range a {
		if v != 1 {
			t.Fatalf("a got %d after it unsubscribed", v)
		}
	}
	f.Close()
	if _, ok := <-b; ok {
		t.Fatal("b open after Close")
	}
	c, _ := f.Subscribe()
	if _, ok := <-c; ok {
		t.Fatal("a subscription after Close is open")
	}
}
