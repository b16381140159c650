package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// stream is one request/response exchange. Fields after the marker are
// guarded by the connection's mutex; the rest belong to the handler's
// goroutine once it started.
type stream struct {
	c      *conn
	id     uint32
	ctx    context.Context
	cancel context.CancelCauseFunc
	// hook runs what waits for ctx to end (the upstream client's
	// interrupt) without a context.AfterFunc per request (see package
	// ctxhook): a reset fires it after cancel.
	hook ctxhook.Slot
	// cancelFn cancels ctx with a cause and fires hook, for the handler
	// (ctxhook.CancelFunc); bound once per pooled stream.
	cancelFn func(cause error)
	req      *http.Request
	body     *requestBody
	run      func() // runHandler, bound once per pooled stream
	resHdr   http.Header
	// reqHdr and reqVals are the request header's map and values, kept
	// for the next request (Server.ReuseRequestHeader).
	reqHdr  http.Header
	reqVals []string
	// raw says the request is offered to Server.Raw with rawFields, its
	// regular header fields as decoded (the slice kept with the stream).
	raw       bool
	rawFields []hpack.HeaderField
	// respBlock and respFields are the response fields a handler passed
	// as read (SetResponseFields): a copy of their head and where they
	// are in it.
	respBlock  string
	respFields []httphead.Field

	// The response's state, owned by the handler's goroutine.
	status      int
	wroteHeader bool
	head        bool   // the request is HEAD: the response has no body
	wbuf        []byte // response body not yet framed
	written     int64  // body bytes the handler wrote
	resCL       int64  // declared Content-Length, -1 when none
	trailerKeys []string

	// Guarded by c.mu.
	bodyCond     sync.Cond // body data, END_STREAM or a reset arrived
	buf          []byte    // request body received, unread from off
	off          int
	declared     int64 // request content-length, -1 when absent
	received     int64
	recvWindow   int32 // what the client may still send
	recvUnacked  int32 // read by the handler, not yet given back
	sendWindow   int64
	remoteDone   bool  // END_STREAM received (or the stream reset)
	localDone    bool  // END_STREAM sent (or the stream reset)
	resetErr     error // why the stream was reset
	bodyClosed   bool
	needContinue bool                // Expect: 100-continue, not yet answered
	sentHeader   bool                // the final response's HEADERS went out
	trailers     []hpack.HeaderField // request trailers, until the body's EOF
	readExpired  bool                // the handler's read deadline passed
	readTimer    *time.Timer
	writeTimer   *time.Timer
	gen          uint64 // bumped on reuse: a late timer finds another stream
	inMap        bool
	handlerDone  bool
	released     bool
}

var streamPool = sync.Pool{New: func() any {
	return &stream{resHdr: make(http.Header, 8)}
}}

func newStream(c *conn, id uint32) *stream {
	st := streamPool.Get().(*stream)
	if st.run == nil {
		st.run = st.runHandler
		st.cancelFn = func(cause error) {
			st.cancel(cause)
			st.hook.Fire()
		}
	}
	st.c, st.id = c, id
	st.bodyCond.L = &c.mu
	st.declared = -1
	st.resCL = -1
	var ctx context.Context
	ctx, st.cancel = context.WithCancelCause(c.streamBase)
	st.ctx = ctxhook.With(ctx, &st.hook)
	// The handler may cancel its stream's context (the proxy's idle
	// timeout does) only while it runs: the stream is reused after.
	st.hook.Init(st.ctx, st.cancelFn)
	return st
}

// free returns st to the pool once nothing refers to it: its handler
// returned (and let go of its request and writer) and the connection
// forgot it.
func (st *stream) free() {
	if st.cancel != nil {
		st.cancel(nil)
	}
	// Clearing an empty map that has had entries still walks it.
	if len(st.resHdr) > 0 {
		clear(st.resHdr)
	}
	if len(st.reqHdr) > 0 {
		clear(st.reqHdr)
	}
	clear(st.reqVals[:cap(st.reqVals)])
	if cap(st.reqVals) > 64 {
		st.reqVals = nil // a rare request with many fields
	}
	buf, wbuf, keys := st.buf, st.wbuf, st.trailerKeys
	if cap(buf) > 64<<10 {
		buf = nil
	}
	clear(keys)
	clear(st.trailers)
	rawFields, respFields := st.rawFields, st.respFields
	clear(rawFields[:cap(rawFields)]) // let go of the strings
	if cap(rawFields) > 64 {
		rawFields = nil
	}
	if cap(respFields) > 64 {
		respFields = nil
	}
	*st = stream{gen: st.gen + 1, resHdr: st.resHdr, reqHdr: st.reqHdr, reqVals: st.reqVals, run: st.run, cancelFn: st.cancelFn, buf: buf[:0], wbuf: wbuf[:0], trailerKeys: keys[:0],
		rawFields: rawFields[:0], respFields: respFields[:0]}
	streamPool.Put(st)
}

// runHandler runs the server's handler for st on a worker.
func (st *stream) runHandler() {
	c := st.c
	rw := &responseWriter{st: st}
	defer func() {
		v := recover()
		if v != nil {
			if err, ok := v.(error); !ok || !errors.Is(err, http.ErrAbortHandler) {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logger().Error("h2: handler panic", "remote", c.remoteAddr, "uri", st.req.RequestURI, "panic", v, "stack", string(buf))
			}
			c.mu.Lock()
			if !st.localDone || st.inMap {
				_ = c.writeRSTLocked(st.id, http2.ErrCodeInternal)
				c.resetLocked(st, streamErr(http2.ErrCodeInternal))
				c.out.kick()
			}
			c.mu.Unlock()
		}
		rw.st = nil
		st.done()
	}()
	if st.raw {
		if c.srv.Raw.ServeRaw(rw, st.req, st.rawFields) {
			st.finish()
			return
		}
		st.rawHeader()
	}
	c.srv.Handler.ServeHTTP(rw, st.req)
	st.finish()
}

// done records that st's handler returned: unread body bytes go back to
// the connection window and, when the client is still sending, the stream
// is reset with NO_ERROR (RFC 9113 §8.1: the response is complete).
func (st *stream) done() {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.body != nil {
		st.body.st = nil
		st.body = nil
	}
	st.req = nil
	for _, t := range []*time.Timer{st.readTimer, st.writeTimer} {
		if t != nil {
			t.Stop()
		}
	}
	st.readTimer, st.writeTimer = nil, nil
	if n := len(st.buf) - st.off; n > 0 {
		c.refundLocked(nil, int32(n))
		st.buf, st.off = st.buf[:0], 0
	}
	st.bodyClosed = true
	if st.inMap && st.localDone && !st.remoteDone {
		_ = c.writeRSTLocked(st.id, http2.ErrCodeNo)
		st.remoteDone = true
		c.closeStreamLocked(st)
		c.out.kick()
	} else if st.inMap && !st.localDone {
		// The response did not end (a write failed on a live stream).
		_ = c.writeRSTLocked(st.id, http2.ErrCodeInternal)
		c.resetLocked(st, streamErr(http2.ErrCodeInternal))
		c.out.kick()
	}
	st.handlerDone = true
	c.handlers--
	c.releaseLocked(st)
	c.cond.Broadcast()
}

// requestBody is a request's Body.
type requestBody struct {
	c  *conn
	st *stream // nil once the handler returned; guarded by c.mu
}

var errBodyAfterHandler = errors.New("h2: request body read after the handler returned")

func (b *requestBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := b.st
	if st == nil {
		return 0, errBodyAfterHandler
	}
	if st.bodyClosed {
		return 0, http.ErrBodyReadAfterClose
	}
	if st.needContinue {
		st.needContinue = false
		// Not when the client sent its body without waiting.
		if !st.sentHeader && st.resetErr == nil && st.received == 0 && !st.remoteDone {
			if err := st.writeFieldsLocked(100, nil, nil, false); err == nil {
				c.out.kick()
			}
		}
	}
	for st.off == len(st.buf) && !st.remoteDone && st.resetErr == nil && !st.bodyClosed && !st.readExpired {
		st.bodyCond.Wait()
	}
	if st.off < len(st.buf) {
		n := copy(p, st.buf[st.off:])
		st.off += n
		if st.off == len(st.buf) {
			st.buf, st.off = st.buf[:0], 0
		}
		c.refundLocked(st, int32(n))
		return n, nil
	}
	if st.resetErr != nil {
		return 0, st.resetErr
	}
	if st.bodyClosed {
		return 0, http.ErrBodyReadAfterClose
	}
	if !st.remoteDone && st.readExpired {
		return 0, os.ErrDeadlineExceeded
	}
	st.moveTrailers()
	return 0, io.EOF
}

// moveTrailers fills the request's Trailer from the trailers received, on
// the goroutine that read the body's EOF.
func (st *stream) moveTrailers() {
	if len(st.trailers) == 0 || st.req == nil {
		return
	}
	r := st.req
	if r.Trailer == nil {
		r.Trailer = make(http.Header, len(st.trailers))
	}
	for _, hf := range st.trailers {
		k := canonicalKey(hf.Name)
		r.Trailer[k] = append(r.Trailer[k], hf.Value)
	}
	st.trailers = nil
}

func (b *requestBody) Close() error {
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := b.st
	if st == nil || st.bodyClosed {
		return nil
	}
	st.bodyClosed = true
	if n := len(st.buf) - st.off; n > 0 {
		c.refundLocked(nil, int32(n))
		st.buf, st.off = st.buf[:0], 0
	}
	st.bodyCond.Broadcast()
	return nil
}

// setDeadline sets the handler's read or write deadline (through
// http.ResponseController); the zero time clears it. A read deadline makes
// a waiting body read return os.ErrDeadlineExceeded; a write deadline
// resets the stream (INTERNAL_ERROR), failing the writes, as x/net's
// server does.
func (st *stream) setDeadline(t time.Time, read bool) error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	timer := &st.writeTimer
	if read {
		timer = &st.readTimer
		st.readExpired = false
	}
	if *timer != nil {
		(*timer).Stop()
		*timer = nil
	}
	if t.IsZero() {
		return nil
	}
	gen := st.gen
	expire := func() {
		if st.gen != gen {
			return
		}
		if read {
			st.readExpired = true
			st.bodyCond.Broadcast()
			return
		}
		if st.inMap {
			_ = c.writeRSTLocked(st.id, http2.ErrCodeInternal)
			c.resetLocked(st, errWriteDeadline)
			c.out.kick()
		}
	}
	d := time.Until(t)
	if d <= 0 {
		expire()
		return nil
	}
	*timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		expire()
	})
	return nil
}

var errWriteDeadline = fmt.Errorf("h2: write deadline: %w", os.ErrDeadlineExceeded)
