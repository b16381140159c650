package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
	"github.com/novaedge/novaedge/slowpath/internal/httphead"
	"github.com/novaedge/novaedge/slowpath/internal/mono"
	"github.com/novaedge/novaedge/slowpath/internal/wbatch"
)

// conn is one client connection and the request state it reuses.
type conn struct {
	s *Server
	// raw is the accepted connection, which Close closes; nc is what is
	// served (raw, or TLS over it), set by init.
	raw net.Conn
	nc  net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	// out is what bw writes to: the end of a response is written in a
	// burst with other connections' (see package wbatch).
	out wbatch.Writer
	// rawOut is what a TLS connection writes its records to (through a
	// wbatch.Conn under it); unused on plaintext connections.
	rawOut wbatch.Writer
	remote string
	state  atomic.Int32
	ctx    context.Context
	cancel context.CancelCauseFunc
	// hook runs what waits for ctx to end (the upstream client's
	// interrupt) without a context.AfterFunc per request.
	hook ctxhook.Slot
	// tmpl carries the connection's context: a request is made by
	// copying it, since a Request's context can only be set by copying.
	tmpl     *http.Request
	req      http.Request
	url      url.URL
	hdr      http.Header
	vals     []string // hdr's values
	w        response
	fields   [32]httphead.Field
	hijacked bool
	// rawReq: the current request was made by parseRaw, its fields are
	// in head (and its string in headStr) and its Header is empty.
	rawReq  bool
	head    Head
	headStr string
	// headCopy holds the head of a raw request with a body.
	headCopy []byte
	// body is the current request's body (nil: none); the handler may
	// replace Request.Body, the server still drains this one.
	body *body
	// readBy is the read deadline waitFor set, as a mono reading; zero:
	// none of its own (another one, or none, is set).
	readBy time.Duration
}

func newConn(s *Server, raw net.Conn) *conn {
	c := &conn{s: s, raw: raw}
	ctx, cancel := context.WithCancelCause(context.Background())
	c.cancel = func(cause error) {
		cancel(cause)
		c.hook.Fire()
	}
	c.ctx = ctxhook.With(ctx, &c.hook)
	// A connection serves one request at a time, so its context is the
	// request's: the handler may cancel it (ctxhook.CancelFunc), which
	// ends the connection after the response.
	c.hook.Init(c.ctx, c.cancel)
	return c
}

// init readies the connection to serve nc: raw itself, or a TLS
// connection over it whose handshake is done.
func (c *conn) init(nc net.Conn) {
	c.nc = nc
	c.tmpl = (&http.Request{}).WithContext(c.ctx)
	if tc, ok := nc.(*tls.Conn); ok {
		// Handshaken already: the state is final.
		st := tc.ConnectionState()
		c.tmpl.TLS = &st
	}
	c.remote = nc.RemoteAddr().String()
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(nc)
	c.out.Reset(nc, wbatch.Default)
	c.out.SetSendTimeout(c.s.SendTimeout)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(&c.out)
	c.hdr = make(http.Header, 8)
	c.w.c = c
	c.w.hdr = make(http.Header, 8)
}

// release gives the buffers back; the connection is no longer read or
// written by this server.
func (c *conn) release() {
	if c.br != nil {
		c.br.Reset(nil)
		readers.Put(c.br)
		c.br = nil
	}
	if c.bw != nil {
		c.bw.Reset(nil)
		writers.Put(c.bw)
		c.bw = nil
	}
}

// wake makes an idle connection's pending read return, so that it sees
// the server draining.
func (c *conn) wake() { _ = c.nc.SetReadDeadline(time.Unix(1, 0)) }

func (c *conn) serve() {
	defer func() {
		c.cancel(nil)
		if !c.hijacked {
			_ = c.out.Sync()
			_ = c.nc.Close()
			c.release()
		}
	}()
	for {
		err := c.serveOne()
		if err != nil {
			if errors.Is(err, errHandoff) {
				c.hijacked = true
			}
			return
		}
	}
}

// serveOne reads and serves one request. It returns nil when the
// connection may serve another.
func (c *conn) serveOne() error {
	s := c.s
	// One deadline per request: the idle (or, for a new connection, the
	// header) timeout covers the wait for the first byte; a head that
	// arrives whole with it, as nearly all do, needs no second one.
	first := c.state.Load() == stateNew
	wait := s.IdleTimeout
	if first || wait == 0 {
		wait = s.ReadHeaderTimeout
	}
	if wait > 0 {
		c.waitFor(wait)
	} else if !first {
		_ = c.setReadDeadline(time.Time{})
	}
	if !first && s.draining.Load() && c.br.Buffered() == 0 {
		// Shutdown may have woken this idle connection just before the
		// deadline above replaced its wake-up.
		return net.ErrClosed
	}
	if _, err := c.br.Peek(1); err != nil {
		return err
	}
	if err := c.skipEmptyLines(); err != nil {
		return err
	}
	// A request that arrived on an idle connection is answered even when
	// the server drains (with "Connection: close"): its bytes are here,
	// and a client could not tell whether a closed connection had seen
	// them. Only a connection that waits for nothing is closed at once.
	c.state.Store(stateActive)
	if first && s.Handoff != nil && !c.speaksHTTP1() {
		c.release2Handoff()
		return errHandoff
	}
	limit := s.maxHead()
	if !httphead.HasHead(c.br) && s.ReadHeaderTimeout > 0 {
		_ = c.setReadDeadline(time.Now().Add(s.ReadHeaderTimeout))
	}
	block, err := httphead.ReadBlock(c.br, limit, errHeadTooLarge, "request head")
	if err != nil {
		if errors.Is(err, errHeadTooLarge) {
			c.reject(http.StatusRequestHeaderFieldsTooLarge, "request head larger than "+fmt.Sprint(limit)+" bytes")
		} else if !isTimeoutOrEOF(err) {
			c.reject(http.StatusBadRequest, err.Error())
		}
		return err
	}
	r, herr := c.parse(block)
	if herr != nil {
		c.reject(herr.status, herr.msg)
		return herr
	}
	if r.ContentLength != 0 && (wait > 0 || s.ReadHeaderTimeout > 0) {
		// The handler reads the body as slowly as it likes; net/http has
		// no body timeout by default either.
		_ = c.setReadDeadline(time.Time{})
	}
	keep := c.handle(r)
	if c.hijacked {
		return errHandoff
	}
	if !keep || c.ctx.Err() != nil {
		// A request canceled through CancelFunc ends its connection: the
		// connection's context is the request's.
		return net.ErrClosed
	}
	c.state.Store(stateIdle)
	if s.draining.Load() {
		return net.ErrClosed
	}
	return nil
}

// waitFor makes the connection's reads end once it has waited for at
// least wait and at most 9/8 of it. A deadline is set only when the one
// set before would end the wait too soon: setting one per request read
// the clock four times and moved a runtime timer, 7 % of the agent's user
// time outside system calls under small keep-alive requests.
func (c *conn) waitFor(wait time.Duration) {
	now := mono.Now()
	if left := c.readBy - now; c.readBy != 0 && left >= wait && left <= wait+wait/8 {
		return
	}
	c.readBy = now + wait + wait/8
	_ = c.nc.SetReadDeadline(mono.Time(c.readBy))
}

// setReadDeadline sets a read deadline other than waitFor's. Only the
// connection's goroutine (which runs the handler) may call it.
func (c *conn) setReadDeadline(t time.Time) error {
	c.readBy = 0
	return c.nc.SetReadDeadline(t)
}

// skipEmptyLines skips a few empty lines before a request line, which
// RFC 9112 §2.2 asks servers to ignore (some clients send one after a
// request body).
func (c *conn) skipEmptyLines() error {
	for range 4 {
		b, err := c.br.Peek(1)
		if err != nil {
			return err
		}
		switch b[0] {
		case '\n':
			_, _ = c.br.Discard(1)
		case '\r':
			b, err = c.br.Peek(2)
			if err != nil {
				return err
			}
			if b[1] != '\n' {
				return nil
			}
			_, _ = c.br.Discard(2)
		default:
			return nil
		}
	}
	return nil
}

// speaksHTTP1 reports whether the first line of the connection is an
// HTTP/1.x request line (rather than HTTP/2's preface or not HTTP). It
// waits for the whole line, at most the read buffer.
func (c *conn) speaksHTTP1() bool {
	const preface = "PRI * HTTP/2.0\r\n"
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		n := min(len(buf), len(preface))
		if string(buf[:n]) == preface[:n] {
			if n == len(preface) {
				return false
			}
		} else {
			i := bytes.IndexByte(buf, '\n')
			if i >= 0 {
				line := httphead.TrimCR(buf[:i])
				sp := bytes.LastIndexByte(line, ' ')
				return len(line) == 0 || sp >= 0 && bytes.HasPrefix(line[sp+1:], []byte("HTTP/1."))
			}
			if len(buf) >= c.br.Size() {
				return true // a very long line: the head limit answers it
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return true // the read error ends the connection in ReadBlock
		}
	}
}

// release2Handoff hands the connection to Server.Handoff with what was
// buffered of it.
func (c *conn) release2Handoff() {
	br := c.br
	c.br = nil
	c.release()
	c.cancel(nil)
	c.s.remove(c)
	_ = c.setReadDeadline(time.Time{})
	_ = c.out.Sync()
	c.s.Handoff(&replayConn{Conn: c.nc, r: br})
}

// replayConn reads first what its server had buffered.
type replayConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *replayConn) Read(b []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(b)
		}
		c.r.Reset(nil)
		readers.Put(c.r)
		c.r = nil
	}
	return c.Conn.Read(b)
}

// CloseWrite half-closes, as net/http does after a response it must not
// read past.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (s *Server) maxHead() int {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return n + 4096
}

func isTimeoutOrEOF(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// reject answers a request the server refuses itself and closes.
func (c *conn) reject(status int, msg string) {
	c.s.log().Debug("http request rejected", "remote", c.remote, "status", status, "reason", msg)
	b := c.w.scratch[:0]
	b = append(b, "HTTP/1.1 "...)
	b = appendStatus(b, status)
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"...)
	body := fmt.Sprintf("%d %s: %s\n", status, http.StatusText(status), msg)
	b = append(b, "Content-Length: "...)
	b = fmt.Appendf(b, "%d\r\n\r\n", len(body))
	b = append(b, body...)
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.bw.Write(b)
	_ = c.bw.Flush()
	c.lingerClose()
}

// lingerClose half-closes and reads what the client still sends for a
// moment before the connection closes: closing with unread input resets
// the connection, and the client could lose the response it has not
// read yet.
func (c *conn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	_ = c.out.Sync()
	_ = cw.CloseWrite()
	_ = c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, 256<<10))
}

// handle runs the handler for r and finishes the response. It reports
// whether the connection may serve another request.
func (c *conn) handle(r *http.Request) (keep bool) {
	w := &c.w
	w.reset(r)
	defer func() {
		if v := recover(); v != nil {
			if c.body != nil {
				c.body.shut()
			}
			if err, ok := v.(error); !ok || !errors.Is(err, http.ErrAbortHandler) {
				c.s.log().Error("http handler panicked", "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
			}
			keep = false
		}
	}()
	if c.rawReq {
		c.rawReq = false
		served := c.s.Raw.ServeRaw(w, r, &c.head)
		if !served {
			c.buildHeader(r)
		}
		c.head, c.headStr = Head{}, ""
		if !served {
			c.s.Handler.ServeHTTP(w, r)
		}
	} else {
		c.s.Handler.ServeHTTP(w, r)
	}
	if c.hijacked {
		return false
	}
	if err := w.finish(); err != nil {
		if c.body != nil {
			c.body.shut() // a reader kept past the handler must not read a closed connection
		}
		return false
	}
	b := c.body
	if !w.closeAfter && (b == nil || b.drain()) {
		return true
	}
	// The connection ends after a complete response; a client still
	// sending must not see it reset.
	if b != nil && !b.shut() || c.br.Buffered() > 0 {
		c.lingerClose()
	}
	return false
}
