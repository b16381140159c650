package h2

import (
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/mono"
)

// writeBuf gathers a connection's frames and writes them in bursts.
//
// Whoever produces a frame (the reader: SETTINGS and PING ACKs,
// WINDOW_UPDATE, RST_STREAM; handlers: HEADERS, DATA, trailers) encodes it
// into buf while holding the connection's mutex and calls kick. When no
// flush is pending, kick starts a goroutine that yields once, so that the
// goroutines made ready along with it (other streams' handlers) add their
// frames, and then writes everything gathered with one system call. No
// frame costs a channel operation or a goroutine switch of its own, and a
// small response costs its handler no blocking at all.
//
// All fields are guarded by the connection's mutex except while flush
// holds a buffer it took out.
type writeBuf struct {
	c     *conn
	buf   []byte // pending, in order
	spare []byte
	// bufH and spareH are the pool's holders of buf and spare, kept so
	// that giving a buffer back allocates no new one.
	bufH, spareH *[]byte
	flushFn      func() // flush, bound once: go flushFn() allocates no closure
	err          error
	flushing     bool // a flush goroutine runs; it owns writing buf
	done         chan struct{}
	// deadline is the write deadline set for the server's SendTimeout,
	// renewed only when less than half of it is left (see writeOut).
	deadline time.Duration // a mono reading
}

// sendChunk is the most one write system call is given, so that the send
// timeout measures progress rather than the time a large burst takes.
const sendChunk = 64 << 10

// maxPending bounds the bytes a handler may leave waiting for the
// connection: a handler's write beyond it waits for the flush. Frames the
// reader produces never wait; floodLimit bounds those instead.
const (
	maxPending = 256 << 10
	floodLimit = 4 << 20
)

// closeFlushWait bounds how long closing waits for pending bytes to
// leave (a GOAWAY, the last responses): a peer that reads nothing must
// not hold the connection open.
const closeFlushWait = 5 * time.Second

var outBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func (w *writeBuf) init(c *conn) {
	w.c = c
	w.flushFn = w.flush
}

// Write appends p to the pending bytes; the Framer calls it, with the
// connection's mutex held, once per frame.
func (w *writeBuf) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.buf == nil {
		w.bufH = outBufs.Get().(*[]byte)
		w.buf = (*w.bufH)[:0]
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// kick starts a flush of the pending bytes unless one is under way.
// Called with the connection's mutex held.
func (w *writeBuf) kick() {
	if w.flushing || len(w.buf) == 0 || w.err != nil {
		return
	}
	w.flushing = true
	go w.flushFn()
}

// full reports whether a handler must wait before adding more.
func (w *writeBuf) full() bool { return len(w.buf) >= maxPending }

// flooded reports whether the client lets replies pile up unread.
func (w *writeBuf) flooded() bool { return len(w.buf) >= floodLimit }

// flush writes the pending bytes until none are left, then hands its
// buffers back to the pool, so an idle connection holds none.
func (w *writeBuf) flush() {
	runtime.Gosched()
	c := w.c
	c.mu.Lock()
	for len(w.buf) > 0 && w.err == nil {
		b, bh := w.buf, w.bufH
		w.buf, w.bufH = w.spare[:0], w.spareH
		w.spare, w.spareH = nil, nil
		c.mu.Unlock()
		err := w.writeOut(b)
		c.mu.Lock()
		w.spare, w.spareH = b[:0], bh
		if err != nil {
			w.err = err
			// The reader notices on its next read.
			_ = c.nc.Close()
		}
		c.cond.Broadcast()
	}
	putOutBuf(w.buf, w.bufH)
	putOutBuf(w.spare, w.spareH)
	w.buf, w.spare, w.bufH, w.spareH = nil, nil, nil, nil
	w.flushing = false
	if w.done != nil {
		close(w.done)
		w.done = nil
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// putOutBuf gives b back to outBufs in its holder h (nil: b is nil, or
// came from elsewhere), unless it grew too large to keep.
func putOutBuf(b []byte, h *[]byte) {
	if b == nil || cap(b) > maxPending+64<<10 {
		return
	}
	if h == nil {
		h = new([]byte)
	}
	*h = b[:0]
	outBufs.Put(h)
}

// writeOut writes b, in pieces of at most sendChunk when the server has
// a SendTimeout, renewing the write deadline as the client takes them.
// Called by the flush goroutine without the connection's mutex.
func (w *writeBuf) writeOut(b []byte) error {
	c := w.c
	timeout := c.srv.SendTimeout
	if timeout <= 0 {
		_, err := c.nc.Write(b)
		return err
	}
	for len(b) > 0 {
		c.mu.Lock()
		if w.err != nil {
			// Closing: the close set its own deadline.
			err := w.err
			c.mu.Unlock()
			return err
		}
		if now := mono.Now(); w.deadline-now < timeout/2 {
			w.deadline = now + timeout
			_ = c.nc.SetWriteDeadline(mono.Time(w.deadline))
		}
		c.mu.Unlock()
		n := min(len(b), sendChunk)
		if _, err := c.nc.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// wait returns once the pending bytes are written, or after at most d;
// from then on nothing more is written.
func (w *writeBuf) wait(d time.Duration) error {
	c := w.c
	c.mu.Lock()
	w.kick()
	var done chan struct{}
	if w.flushing {
		if w.done == nil {
			w.done = make(chan struct{})
		}
		done = w.done
	}
	c.mu.Unlock()
	if done != nil {
		t := time.NewTimer(d)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	c.cond.Broadcast()
	return nil
}

// close writes what is pending, waiting at most closeFlushWait, and closes
// the connection.
func (w *writeBuf) close() error {
	c := w.c
	_ = w.wait(closeFlushWait)
	err := c.nc.Close()
	c.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return err
}
