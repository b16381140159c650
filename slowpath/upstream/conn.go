package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
	"github.com/novaedge/novaedge/slowpath/internal/wbatch"
	"github.com/novaedge/novaedge/slowpath/upstream/internal/sockcheck"
)

// aLongTimeAgo is a deadline in the past: setting it makes blocked and
// future reads and writes on a connection fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one connection to an endpoint. It is used by one exchange at a
// time: the pool hands it out, the exchange gives it back (or closes it).
type conn struct {
	p  *hostPool
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// out is what bw writes to: a request written whole goes out in a
	// burst with other connections' (see package wbatch).
	out wbatch.Writer
	// idleAt is when the connection was last put in the pool (a mono
	// reading: the wall clock is not needed, and a read of it per
	// request is not free).
	idleAt time.Duration
	// reused: the connection served an exchange before this one.
	reused bool
	// written and read count bytes moved on the connection in the current
	// exchange, to tell whether the server can have seen the request and
	// whether it answered at all.
	written, read int64
	// stop ends the current exchange's watch of its context (nil: no
	// watch); interrupt is what the watch runs when the context ends.
	stop      func() bool
	hook      ctxhook.Hook // instead of stop, for a context with one
	interrupt func()
	// checker looks for a close from the server (made at the first
	// check).
	checker sockcheck.Checker
	checked bool
}

func newConn(p *hostPool, nc net.Conn) *conn {
	c := &conn{p: p, nc: nc}
	c.out.Reset(nc, wbatch.Default)
	c.br = bufio.NewReaderSize(connIO{c}, readBufSize)
	c.bw = bufio.NewWriterSize(connIO{c}, writeBufSize)
	c.interrupt = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	return c
}

// connIO counts the bytes between the buffers and the connection.
type connIO struct{ c *conn }

func (x connIO) Read(p []byte) (int, error) {
	n, err := x.c.nc.Read(p)
	x.c.read += int64(n)
	return n, err
}

func (x connIO) Write(p []byte) (int, error) {
	n, err := x.c.out.Write(p)
	x.c.written += int64(n)
	return n, err
}

func (c *conn) close() { _ = c.nc.Close() }

// alive reports whether an idle connection can take a request: the server
// has not closed it or sent anything unasked. It costs one recv(2) that
// does not block.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if !c.checked {
		c.checker, c.checked = sockcheck.For(c.nc), true
	}
	switch c.checker.Check() {
	case sockcheck.Idle, sockcheck.Unknown:
		return true
	}
	return false
}

// watch makes the end of ctx interrupt the connection's reads and writes
// until unwatch. It starts no goroutine unless ctx ends.
func (c *conn) watch(ctx context.Context) {
	if h, ok := ctxhook.Of(ctx); ok {
		h.Watch(c.interrupt)
		c.hook = h
		return
	}
	if ctx.Done() != nil {
		c.stop = context.AfterFunc(ctx, c.interrupt)
	}
}

// unwatch ends the watch. False means the context ended and its interrupt
// ran or is running: the connection's deadlines are spoiled and it must
// not be used again.
func (c *conn) unwatch() bool {
	if h := c.hook; h != nil {
		c.hook = nil
		return h.Unwatch()
	}
	if c.stop == nil {
		return true
	}
	ok := c.stop()
	c.stop = nil
	return ok
}

// finish ends an exchange whose response was read completely: the
// connection goes back to the pool if it can serve another.
func (c *conn) finish(keep bool) {
	if c.unwatch() && keep && c.br.Buffered() == 0 {
		c.p.put(c)
		return
	}
	c.p.discard(c)
}

// fail ends the exchange with an error of the connection: it is closed,
// and the error says what the server can have seen.
func (c *conn) fail(ctx context.Context, what string, err error) error {
	c.unwatch()
	c.p.discard(c)
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s: %w", what, c.p.addr, ctxErr(ctx))
	}
	return &exchangeError{
		err:            fmt.Errorf("%s %s: %w", what, c.p.addr, err),
		nothingWritten: c.written == 0,
		nothingRead:    c.read == 0,
	}
}

// abort ends the exchange with an error that is not the connection's (a
// request body that could not be read, a response that does not parse).
func (c *conn) abort(err error) error {
	c.unwatch()
	c.p.discard(c)
	return err
}

// roundTrip does one exchange on c. The connection is given back or closed
// when the response body ends, at once if there is none, or on error.
// s (nil: none) is where the response is built (see Scratch).
func (c *conn) roundTrip(ctx context.Context, req *http.Request, host string, body io.ReadCloser, got1xx Got1xx, s *Scratch) (*http.Response, error) {
	t := c.p.t
	c.written, c.read = 0, 0
	c.watch(ctx)
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	length, chunked := int64(0), false
	if body != nil {
		length = req.ContentLength
		if length <= 0 || hasChunked(req.TransferEncoding) {
			length, chunked = -1, true
		}
	}
	expect := body != nil && t.ExpectContinueTimeout > 0 && httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue")
	c.writeHead(req, method, host, length, chunked, s)

	// Deadlines for reading the head: while the body waits for a 100
	// Continue, until ExpectContinueTimeout; once the body is sent,
	// ResponseHeaderTimeout if set.
	var expectBy, headBy, cur time.Time
	bodySent := body == nil
	sendBody := func() (*http.Response, error) {
		if resp, err := c.sendBody(ctx, req, method, body, length, chunked); resp != nil || err != nil {
			return resp, err
		}
		bodySent = true
		if t.ResponseHeaderTimeout > 0 {
			headBy = time.Now().Add(t.ResponseHeaderTimeout)
		}
		return nil, nil
	}
	// setDeadline sets the read deadline. Setting one may overwrite the
	// context's interrupt, hence the check of the context after.
	setDeadline := func(d time.Time) error {
		if d.Equal(cur) {
			return nil
		}
		cur = d
		if err := c.nc.SetReadDeadline(d); err != nil {
			return c.fail(ctx, "read response from", err)
		}
		if ctx.Err() != nil {
			return c.fail(ctx, "read response from", os.ErrDeadlineExceeded)
		}
		return nil
	}
	if expect {
		if err := c.bw.Flush(); err != nil {
			return nil, c.fail(ctx, "write request to", err)
		}
		expectBy = time.Now().Add(t.ExpectContinueTimeout)
	} else if resp, err := sendBody(); resp != nil || err != nil {
		return resp, err
	}

	for n1xx := 0; ; n1xx++ {
		if !bodySent {
			if err := setDeadline(expectBy); err != nil {
				return nil, err
			}
			if _, err := c.br.Peek(1); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil {
					return nil, c.fail(ctx, "read response from", err)
				}
				// No 100 Continue in time: send the body anyway.
				if err := setDeadline(time.Time{}); err != nil {
					return nil, err
				}
				if resp, err := sendBody(); resp != nil || err != nil {
					return resp, err
				}
				continue
			}
		}
		if err := setDeadline(headBy); err != nil {
			return nil, err
		}
		h, err := c.readHead(s)
		if err != nil {
			return nil, c.headErr(ctx, err, !headBy.IsZero())
		}
		if h.code >= 200 || h.code == http.StatusSwitchingProtocols {
			if err := setDeadline(time.Time{}); err != nil {
				return nil, err
			}
			// A final answer before the body was sent: the server will
			// not read it, so the connection cannot carry another request.
			return c.response(ctx, req, method, h, !bodySent, s)
		}
		if n1xx >= max1xx {
			return nil, c.abort(fmt.Errorf("response from %s: more than %d informational responses: %w", c.p.addr, max1xx, ErrMalformedResponse))
		}
		if got1xx == nil {
			if trace := httptrace.ContextClientTrace(ctx); trace != nil {
				got1xx = trace.Got1xxResponse
			}
		}
		if got1xx != nil {
			if err := got1xx(h.code, textproto.MIMEHeader(h.header)); err != nil {
				return nil, c.abort(err)
			}
		}
		if h.code == http.StatusContinue && !bodySent {
			if err := setDeadline(time.Time{}); err != nil {
				return nil, err
			}
			if resp, err := sendBody(); resp != nil || err != nil {
				return resp, err
			}
		}
	}
}

// readHead reads and parses one response head. It does not end the
// exchange on error (headErr does).
func (c *conn) readHead(s *Scratch) (head, error) {
	block, err := c.readBlock(c.p.t.maxHeaderBytes())
	if err != nil {
		return head{}, err
	}
	if s == nil {
		return parseHead(block, nil)
	}
	var h head
	if s.wantFields {
		h, err = parseFields(block, s)
	} else {
		h, err = parseHead(block, s.header)
	}
	if err == nil {
		s.header = h.header
	}
	return h, err
}

// headErr ends the exchange after readHead failed.
func (c *conn) headErr(ctx context.Context, err error, headDeadline bool) error {
	switch {
	case errors.Is(err, ErrMalformedResponse) || errors.Is(err, errHeadTooLarge):
		return c.abort(fmt.Errorf("response from %s: %w", c.p.addr, err))
	case headDeadline && ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded):
		return c.abort(fmt.Errorf("read response from %s: %w", c.p.addr, ErrResponseHeaderTimeout))
	case errors.Is(err, io.EOF) && c.read > 0:
		err = fmt.Errorf("connection closed within the response head: %w", io.ErrUnexpectedEOF)
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("connection closed before the response: %w", io.EOF)
	}
	return c.fail(ctx, "read response from", err)
}

// writeHead buffers the request line and header fields.
func (c *conn) writeHead(req *http.Request, method, host string, length int64, chunked bool, s *Scratch) {
	w := c.bw
	_, _ = w.WriteString(method)
	_ = w.WriteByte(' ')
	writeTarget(w, req, method)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(host)
	_, _ = w.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // from the request's fields
		}
		for _, v := range vs {
			if v == "" && k == "User-Agent" {
				continue // httputil.ReverseProxy's way of saying none
			}
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(v)
			_, _ = w.WriteString("\r\n")
		}
	}
	if s != nil {
		for _, f := range s.reqFields {
			_, _ = w.Write(f.Name(s.reqBlock))
			_, _ = w.WriteString(": ")
			_, _ = w.Write(f.Value(s.reqBlock))
			_, _ = w.WriteString("\r\n")
		}
		_, _ = w.Write(s.reqLines)
	}
	switch {
	case chunked:
		_, _ = w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			_, _ = w.WriteString("Trailer: ")
			first := true
			for k := range req.Trailer {
				if !first {
					_, _ = w.WriteString(", ")
				}
				first = false
				_, _ = w.WriteString(k)
			}
			_, _ = w.WriteString("\r\n")
		}
	case length > 0 || (method != http.MethodGet && method != http.MethodHead):
		// Many servers want a length for POST, PUT and the like even
		// without a body, as net/http sends it.
		_, _ = w.WriteString("Content-Length: ")
		_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), max(length, 0), 10))
		_, _ = w.WriteString("\r\n")
	}
	if req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		_, _ = w.WriteString("Connection: close\r\n")
	}
	_, _ = w.WriteString("\r\n")
}

// writeTarget writes the request target: the URL's path and query (the
// host for CONNECT).
func writeTarget(w *bufio.Writer, req *http.Request, method string) {
	u := req.URL
	switch {
	case method == http.MethodConnect && u.Path == "":
		if u.Opaque != "" {
			_, _ = w.WriteString(u.Opaque)
		} else {
			_, _ = w.WriteString(u.Host)
		}
		return
	case u.Opaque != "":
		_, _ = w.WriteString(u.RequestURI())
		return
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	_, _ = w.WriteString(p)
	if u.ForceQuery || u.RawQuery != "" {
		_ = w.WriteByte('?')
		_, _ = w.WriteString(u.RawQuery)
	}
}

var scratchPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// sendBody writes the request body after the buffered head and flushes.
// A body that cannot be read ends the exchange with its error (wrapped,
// so that http.MaxBytesError stays visible). A connection that fails
// while the body is written may carry an answer the server sent before it
// stopped reading (a 413, say); that answer is returned rather than the
// write error.
func (c *conn) sendBody(ctx context.Context, req *http.Request, method string, body io.Reader, length int64, chunked bool) (*http.Response, error) {
	w := c.bw
	var bodyErr, connErr error
	switch {
	case body == nil:
	case !chunked && length <= int64(w.Available()):
		// Small: read it straight into the write buffer, behind the head.
		buf := w.AvailableBuffer()[:length]
		n, err := io.ReadFull(body, buf)
		_, _ = w.Write(buf[:n])
		bodyErr = err
	default:
		bodyErr, connErr = c.copyBody(body, length, chunked, req.Trailer)
	}
	if bodyErr != nil {
		if errors.Is(bodyErr, io.EOF) || errors.Is(bodyErr, io.ErrUnexpectedEOF) {
			bodyErr = ErrBodyTooShort
		}
		if ctx.Err() != nil {
			return nil, c.fail(ctx, "read request body for", bodyErr)
		}
		return nil, c.abort(fmt.Errorf("read request body: %w", bodyErr))
	}
	if connErr == nil {
		if w.Buffered() > 0 {
			// The request is complete: it may wait for the burst.
			c.out.Defer()
		}
		connErr = w.Flush()
	}
	if connErr != nil {
		if ctx.Err() == nil && c.written > 0 {
			if resp, err := c.earlyResponse(ctx, req, method); resp != nil || err != nil {
				return resp, err
			}
		}
		return nil, c.fail(ctx, "write request to", connErr)
	}
	return nil, nil
}

// copyBody writes a large or chunked body through a 32 KiB buffer. Each
// read that returned less than asked is flushed at once, so a body that
// streams reaches the server as it comes. It returns the body's error or
// the connection's.
func (c *conn) copyBody(body io.Reader, length int64, chunked bool, trailer http.Header) (bodyErr, connErr error) {
	w := c.bw
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	buf := *bp
	remaining := length
	for chunked || remaining > 0 {
		p := buf
		if !chunked && remaining < int64(len(p)) {
			p = p[:remaining]
		}
		n, err := body.Read(p)
		if n > 0 {
			if chunked {
				if w.Available() < 24 {
					if err := w.Flush(); err != nil {
						return nil, err
					}
				}
				_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(n), 16))
				_, _ = w.WriteString("\r\n")
			}
			if _, err := w.Write(p[:n]); err != nil {
				return nil, err
			}
			if chunked {
				_, _ = w.WriteString("\r\n")
			}
			remaining -= int64(n)
			if n < len(p) && err == nil {
				if err := w.Flush(); err != nil {
					return nil, err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			if !chunked && remaining > 0 {
				return io.ErrUnexpectedEOF, nil
			}
			break
		}
		if err != nil {
			return err, nil
		}
	}
	if chunked {
		_, _ = w.WriteString("0\r\n")
		for k, vs := range trailer {
			for _, v := range vs {
				_, _ = w.WriteString(k)
				_, _ = w.WriteString(": ")
				_, _ = w.WriteString(v)
				_, _ = w.WriteString("\r\n")
			}
		}
		_, _ = w.WriteString("\r\n")
	}
	return nil, nil
}

// earlyResponse looks, for a short while, for a response the server sent
// before the request body was written completely. It returns nil and no
// error if there is none; an error means the exchange has ended.
func (c *conn) earlyResponse(ctx context.Context, req *http.Request, method string) (*http.Response, error) {
	if c.nc.SetReadDeadline(time.Now().Add(earlyResponseWait)) != nil {
		return nil, nil
	}
	for range max1xx {
		h, err := c.readHead(nil)
		if err != nil {
			return nil, nil
		}
		if h.code < 200 && h.code != http.StatusSwitchingProtocols {
			continue
		}
		if !c.resetDeadline(ctx) || h.code == http.StatusSwitchingProtocols {
			return nil, nil
		}
		return c.response(ctx, req, method, h, true, nil)
	}
	return nil, nil
}

// resetDeadline clears the read deadline. It reports false if the context
// ended meanwhile: its interrupt may have been overwritten.
func (c *conn) resetDeadline(ctx context.Context) bool {
	if c.nc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	return ctx.Err() == nil
}

func hasChunked(te []string) bool {
	for _, v := range te {
		if v == "chunked" {
			return true
		}
	}
	return false
}
