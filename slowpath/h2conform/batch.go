package h2conform

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// batchWriter gathers an HTTP/2 connection's writes into fewer system
// calls.
//
// x/net's server flushes whenever its queue of frames runs empty, and a
// handler's HEADERS and DATA frames reach that queue one after the other,
// each waited for: a small response costs two writes, and concurrent
// streams' responses are never written together (h2load with 16 streams
// per connection: 1.8 writes per response, where HAProxy makes one write
// for many). A write here only appends to a buffer and, when none is
// pending, starts a goroutine that yields once, letting the goroutines
// that are ready to add frames do so, and then writes everything
// gathered. perf/httpbench, h2c: 1.6× the requests per second at 0.62×
// the CPU per request (perf/results/http-2026-11-27T172354Z.md).
//
// Writes return before their bytes reach the connection: an error shows at
// the next write (x/net then ends the connection, as it would have).
// Ordering is kept, at most maxPending bytes wait (a write beyond that
// waits for the connection), and close writes what is pending first.
type batchWriter struct {
	conn net.Conn

	mu       sync.Mutex
	drained  sync.Cond // signalled when buf was written or err set
	buf      []byte    // pending, in order
	spare    []byte
	err      error
	flushing bool // a flush goroutine runs; it owns writing buf
}

// maxPending bounds the bytes waiting for the connection.
const maxPending = 256 << 10

// closeFlushWait bounds how long close waits for pending bytes to leave
// (a GOAWAY, the last response) before closing anyway; a peer that reads
// nothing must not hold the connection open. A variable for tests.
var closeFlushWait = 5 * time.Second

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func (w *batchWriter) init(c net.Conn) {
	w.conn = c
	w.drained.L = &w.mu
}

// Write appends p to the pending bytes.
func (w *batchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	for w.err == nil && len(w.buf) >= maxPending {
		w.drained.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return 0, err
	}
	if w.buf == nil {
		w.buf = (*batchBufs.Get().(*[]byte))[:0]
	}
	w.buf = append(w.buf, p...)
	if !w.flushing {
		w.flushing = true
		go w.flush()
	}
	w.mu.Unlock()
	return len(p), nil
}

// flush writes the pending bytes until none are left, then hands its
// buffers back to the pool, so an idle connection holds none.
func (w *batchWriter) flush() {
	// The goroutines readied along with this one (a handler whose HEADERS
	// were just queued, other streams' handlers) run first and add theirs.
	runtime.Gosched()
	w.mu.Lock()
	for len(w.buf) > 0 && w.err == nil {
		b := w.buf
		w.buf = w.spare[:0]
		w.spare = nil
		w.mu.Unlock()
		_, err := w.conn.Write(b)
		w.mu.Lock()
		w.spare = b[:0]
		if err != nil {
			w.err = err
		}
		w.drained.Broadcast()
	}
	for _, b := range [][]byte{w.buf, w.spare} {
		if b != nil && cap(b) <= maxPending+64<<10 {
			b = b[:0]
			batchBufs.Put(&b)
		}
	}
	w.buf, w.spare = nil, nil
	w.flushing = false
	w.drained.Broadcast()
	w.mu.Unlock()
}

// close writes what is pending, waiting at most closeFlushWait, and closes
// the connection; a write still blocked then fails with it.
func (w *batchWriter) close() error {
	done := make(chan struct{})
	go func() {
		w.mu.Lock()
		for w.flushing && w.err == nil {
			w.drained.Wait()
		}
		w.mu.Unlock()
		close(done)
	}()
	t := time.NewTimer(closeFlushWait)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	err := w.conn.Close()
	w.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.drained.Broadcast()
	w.mu.Unlock()
	return err
}

// wait returns once no bytes are pending (or writing failed), for a write
// that must go to the connection directly after them.
func (w *batchWriter) wait() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing && w.err == nil {
		w.drained.Wait()
	}
	return w.err
}
