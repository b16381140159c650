// Package wbatch gathers the last write of many connections' messages into
// one burst.
//
// The slow path serves a connection per goroutine, and each goroutine
// writes its message (a response to the client, a request to the
// backend) the moment it is complete. On loopback and on a busy node much
// of a write's cost is waking the peer, and a peer that went idle between
// two writes must be woken again: perf/httpbench with wrk put
// sock_def_readable's wakeups at 18 % of the agent's CPU, against 10 % of
// HAProxy's, whose event loop sends the answers of every ready connection
// one after the other. A Writer hands a finished message to its Batcher
// instead; the Batcher writes the messages of all goroutines that ran in
// the meantime back to back, once the scheduler has run them (a goroutine
// of its own that yields once before writing).
//
// Only messages the owner marks with Defer are gathered, and only on
// *net.TCPConn and *net.UnixConn connections (other types are written to
// directly; a TLS connection is batched from below, by putting a Conn
// under it): the
// Batcher writes without blocking, and a connection that cannot take the
// whole message at once gets a goroutine that finishes it with an
// ordinary write (its deadlines apply). Any other write, and Sync, first
// writes what is pending, so bytes leave in order. A failed deferred write
// closes the connection, so that an owner waiting to read learns of it.
package wbatch

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/mono"
)

// Batcher writes the deferred messages of its Writers.
type Batcher struct {
	mu      sync.Mutex
	queue   []*Writer
	spare   []*Writer
	running bool
}

// Default is the process's Batcher.
var Default = new(Batcher)

// Writer is the write side of one connection. Its methods other than the
// Batcher's are called by one goroutine at a time, the connection's owner.
type Writer struct {
	nc net.Conn
	rc syscall.RawConn // nil: every write is direct
	b  *Batcher

	deferNext bool

	mu     sync.Mutex
	idle   sync.Cond // signalled when busy ends
	buf    []byte    // deferred bytes not yet written
	queued bool      // in the Batcher's queue
	busy   bool      // a goroutine writes out a message the Batcher could not finish
	err    error     // a deferred write failed

	// timeout bounds how long a write may wait for the peer to take it
	// (SetSendTimeout; zero: no bound); deadline is the write deadline
	// set for it, renewed only when less than half of timeout is left,
	// so that most writes cost no timer.
	timeout  time.Duration
	deadline time.Duration // a mono reading

	// The argument and results of writeFD, which tryWrite hands to
	// RawConn.Write as a method value made once (a closure per write
	// would be an allocation). Used under mu.
	wfn  func(uintptr) bool
	wp   []byte
	wn   int
	werr error
}

// Reset makes w the write side of nc, batched by b; nil nc detaches it.
// Pending bytes must have been written (Sync).
func (w *Writer) Reset(nc net.Conn, b *Batcher) {
	if w.idle.L == nil {
		w.idle.L = &w.mu
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.busy {
		w.idle.Wait()
	}
	w.nc, w.b, w.rc, w.deferNext, w.err = nc, b, nil, false, nil
	w.timeout, w.deadline = 0, 0
	w.buf = w.buf[:0]
	if nc == nil || b == nil {
		return
	}
	// Only the standard types: a wrapper's Write (TLS, counting,
	// replaying) must not be bypassed by writing to its descriptor.
	var sc syscall.Conn
	switch c := nc.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		w.rc = rc
		if w.wfn == nil {
			w.wfn = w.writeFD
		}
	}
}

// SetSendTimeout makes every write fail (and a deferred one close the
// connection) when the peer takes none of it for about d (d to 1.5 d): a
// client that stops reading cannot hold its connection and the goroutine
// writing to it for good. Zero: no bound. The Writer then owns the
// connection's write deadline.
func (w *Writer) SetSendTimeout(d time.Duration) {
	w.mu.Lock()
	w.timeout, w.deadline = d, 0
	w.mu.Unlock()
}

// arm renews the write deadline when less than half the timeout is
// left. w.mu is held.
func (w *Writer) arm() {
	if w.timeout <= 0 {
		return
	}
	now := mono.Now()
	if w.deadline-now >= w.timeout/2 {
		return
	}
	w.deadline = now + w.timeout
	_ = w.nc.SetWriteDeadline(mono.Time(w.deadline))
}

// Defer makes the next Write a deferred one: its bytes are copied and
// written by the Batcher. Call it just before flushing a complete message.
func (w *Writer) Defer() { w.deferNext = w.rc != nil }

// Write writes p, or defers it (see Defer).
func (w *Writer) Write(p []byte) (int, error) {
	if w.deferNext {
		w.deferNext = false
		w.mu.Lock()
		if err := w.err; err != nil {
			w.mu.Unlock()
			return 0, err
		}
		w.buf = append(w.buf, p...)
		enqueue := !w.queued && !w.busy
		w.queued = w.queued || enqueue
		w.mu.Unlock()
		if enqueue {
			w.b.add(w)
		}
		return len(p), nil
	}
	if err := w.Sync(); err != nil {
		return 0, err
	}
	if w.timeout > 0 {
		w.mu.Lock()
		w.arm()
		w.mu.Unlock()
	}
	return w.nc.Write(p)
}

// Sync writes the deferred bytes now and returns the error of any
// deferred write.
func (w *Writer) Sync() error {
	if w.rc == nil {
		return nil
	}
	w.mu.Lock()
	for w.busy {
		w.idle.Wait()
	}
	if w.err != nil || len(w.buf) == 0 {
		err := w.err
		w.mu.Unlock()
		return err
	}
	// Written here: the Batcher finds nothing when it comes to w.
	out := w.buf
	w.buf = nil
	w.busy = true
	w.arm()
	w.mu.Unlock()
	_, err := w.nc.Write(out)
	w.mu.Lock()
	w.busy = false
	w.buf = out[:0]
	if err != nil {
		w.err = err
	}
	w.idle.Broadcast()
	w.mu.Unlock()
	return err
}

func (b *Batcher) add(w *Writer) {
	b.mu.Lock()
	b.queue = append(b.queue, w)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.run()
	}
}

// run writes what is queued until the queue stays empty.
func (b *Batcher) run() {
	// The goroutine starts next on this P; yielding puts it behind the
	// goroutines that are ready now, whose messages then join this burst.
	runtime.Gosched()
	for {
		b.mu.Lock()
		q := b.queue
		if len(q) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.queue = b.spare[:0]
		b.spare = nil
		b.mu.Unlock()
		for i, w := range q {
			w.flush()
			q[i] = nil
		}
		b.mu.Lock()
		b.spare = q[:0]
		b.mu.Unlock()
	}
}

// flush writes w's deferred bytes without blocking; what the connection
// does not take at once is left to a goroutine of its own.
func (w *Writer) flush() {
	w.mu.Lock()
	w.queued = false
	if w.busy || w.err != nil || len(w.buf) == 0 {
		w.mu.Unlock()
		return
	}
	// Also for a write that does not wait: an expired deadline would fail it.
	w.arm()
	n, err := w.tryWrite(w.buf)
	switch {
	case err == nil && n == len(w.buf):
		w.buf = w.buf[:0]
		w.mu.Unlock()
		return
	case err != nil && !errors.Is(err, syscall.EAGAIN):
		w.fail(err)
		w.mu.Unlock()
		return
	}
	out := w.buf[n:]
	w.buf = nil
	w.busy = true
	w.mu.Unlock()
	go w.finish(out)
}

// tryWrite makes one non-blocking write of p. w.mu is held.
func (w *Writer) tryWrite(p []byte) (n int, err error) {
	w.wp = p
	werr := w.rc.Write(w.wfn)
	n, err = w.wn, w.werr
	w.wp, w.werr = nil, nil
	if werr != nil {
		return 0, werr
	}
	return max(n, 0), err
}

// writeFD writes w.wp once, never waiting for the socket.
func (w *Writer) writeFD(fd uintptr) bool {
	for {
		w.wn, w.werr = syscall.Write(int(fd), w.wp)
		if !errors.Is(w.werr, syscall.EINTR) {
			return true
		}
	}
}

// finish writes out the rest of a message the Batcher began.
func (w *Writer) finish(out []byte) {
	w.mu.Lock()
	w.arm()
	w.mu.Unlock()
	_, err := w.nc.Write(out)
	w.mu.Lock()
	w.busy = false
	if err != nil {
		w.fail(err)
	} else if len(w.buf) > 0 && !w.queued {
		// Deferred while this one was written.
		w.queued = true
		w.mu.Unlock()
		w.idle.Broadcast()
		w.b.add(w)
		return
	}
	w.idle.Broadcast()
	w.mu.Unlock()
}

// fail records a deferred write's error and closes the connection, which
// ends the owner's wait for an answer. w.mu is held.
func (w *Writer) fail(err error) {
	w.err = err
	w.buf = w.buf[:0]
	_ = w.nc.Close()
}

// Conn is a connection whose writes go through W, a Writer of the
// connection itself. Put under a TLS connection, it lets the record that
// ends a response be deferred like a plaintext response's end: the owner
// calls W.Defer before flushing the response into the TLS connection.
// Close and CloseWrite write what is pending first.
type Conn struct {
	net.Conn
	W *Writer
}

func (c Conn) Write(p []byte) (int, error) { return c.W.Write(p) }

// Close writes what is pending, then closes.
func (c Conn) Close() error {
	_ = c.W.Sync()
	return c.Conn.Close()
}

// CloseWrite writes what is pending, then half-closes (when the
// connection can).
func (c Conn) CloseWrite() error {
	if err := c.W.Sync(); err != nil {
		return err
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
