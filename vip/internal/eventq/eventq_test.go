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
