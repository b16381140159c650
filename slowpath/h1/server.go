// Package h1 is the slow path's HTTP/1.1 server, for plaintext
// connections and TLS connections whose handshake chose HTTP/1.1 (or no
// protocol): Request.TLS is set for those.
//
// net/http's server spends more CPU around a proxied request than the
// proxy itself: a goroutine and a read that fails with EAGAIN per request
// for its background read, six deadline changes, and a new Request,
// header map, context and response for each request. This server keeps
// all per-request state in its connection and reuses it, sets one read
// deadline per request, and answers a small response with one write. It
// serves http.Handler, so the proxy's handler serves it and net/http's
// HTTP/2 and TLS servers alike.
//
// It is as strict as net/http's server where framing is concerned, and
// stricter where a proxy must be (see parse.go): a request whose length
// could be read two ways is refused, never guessed at.
//
// Differences from net/http a handler may notice:
//   - A request's context is its connection's: it ends when the
//     connection is closed by the server, not when the client goes away
//     during the request (HAProxy's default, "no option abortonclose");
//     a client that is gone is noticed when the response is written.
//   - A response without Content-Type gets none (no sniffing): a proxy
//     passes what the backend said.
//   - Handlers must not use the Request or ResponseWriter after ServeHTTP
//     returns (net/http's contract too): both are reused.
package h1

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
	"github.com/novaedge/novaedge/slowpath/internal/wbatch"
)

// Server serves HTTP/1.x on plaintext connections handed to ServeConn.
type Server struct {
	// Handler serves every request.
	Handler http.Handler
	// ReadHeaderTimeout bounds the time from a request's first byte (or a
	// new connection) to the end of its head.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long, or up
	// to an eighth longer (a deadline is set once for many requests).
	IdleTimeout time.Duration
	// SendTimeout closes a connection whose client takes none of a
	// response for this long (slow-read protection, nginx's
	// send_timeout). Zero: none.
	SendTimeout time.Duration
	// MaxHeaderBytes bounds a request head (request line and fields);
	// like net/http, 4096 bytes more are allowed. Larger heads get 431.
	MaxHeaderBytes int
	// Handoff takes a connection whose first line is no HTTP/1.x request
	// line (HTTP/2's connection preface, or not HTTP at all), for another
	// server to serve; the connection replays what was read of it. Nil:
	// such a connection gets 400 (or 505) and is closed.
	Handoff func(net.Conn)
	// Raw, if set, is offered every request that has an origin-form
	// target, one Host field, no body or one framed by Content-Length, and
	// no Upgrade or Expect field, before its header map is built (see
	// RawHandler).
	Raw RawHandler
	// Log gets one debug line per rejected request and an error per
	// handler panic. Nil: slog's default.
	Log *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining atomic.Bool
	done     chan struct{} // closed when draining and the last connection ends
}

// Connection states, for draining.
const (
	stateNew    int32 = iota // accepted, no byte of a request read yet
	stateActive              // reading or serving a request
	stateIdle                // between requests of a keep-alive connection
)

// ServeConn serves nc until it closes, fails or is hijacked, and closes
// it (unless hijacked or handed off). A *tls.Conn must have completed its
// handshake. It returns at once, closing nc, when the server is shutting
// down.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	if !s.add(c, false) {
		_ = nc.Close()
		return
	}
	c.init(nc)
	c.serve()
	s.remove(c)
}

// Go serves nc, just accepted, in a goroutine of its own. The connection
// is the server's from this call on: a Shutdown that starts after Go
// returns waits for it and answers its first request (with "Connection:
// close") rather than closing it unanswered, so an accept loop that ends
// before Shutdown loses no connection. prepare, if not nil, runs first in
// that goroutine (a TLS handshake, say) and returns the connection to
// serve, or nil when the connection is not this server's to serve (it
// failed, and prepare closed it, or went elsewhere).
func (s *Server) Go(nc net.Conn, prepare func(net.Conn) net.Conn) {
	c := newConn(s, nc)
	s.add(c, true)
	go func() {
		defer s.remove(c)
		sc := nc
		if prepare != nil {
			// Under TLS: the record that ends a response is written in a
			// burst like a plaintext response's end (see conn.rawOut).
			c.rawOut.Reset(nc, wbatch.Default)
			if sc = prepare(wbatch.Conn{Conn: nc, W: &c.rawOut}); sc == nil {
				c.cancel(nil)
				return
			}
		}
		c.init(sc)
		c.serve()
	}()
}

// add makes c one of the server's connections. While draining it fails,
// unless evenDraining (see Go).
func (s *Server) add(c *conn, evenDraining bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() && !evenDraining {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

// remove forgets c (closed, hijacked or handed off); the last one to go
// ends a Shutdown.
func (s *Server) remove(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.draining.Load() && len(s.conns) == 0 && s.done != nil {
		close(s.done)
		s.done = nil
	}
}

// Shutdown drains: every connection closes after the response it is
// serving, idle keep-alive connections close now, a new connection gets
// its first request answered (with "Connection: close"). It returns when
// all are closed, or closes what is left when ctx ends. Callers close the
// listener first, so that no new connection arrives.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	s.done = done
	for c := range s.conns {
		if c.state.Load() == stateIdle {
			c.wake()
		}
	}
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		_ = s.Close()
		return ctx.Err()
	}
}

// Close closes every connection now; handlers see their requests'
// contexts end.
func (s *Server) Close() error {
	s.mu.Lock()
	s.draining.Store(true)
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		// Closed first: a handler that returns when its context ends
		// must find no connection to answer on. The accepted connection
		// is closed: one still in its TLS handshake has no other yet.
		_ = c.raw.Close()
		c.cancel(nil)
	}
	return nil
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Buffers of connections, reused: a keep-alive connection holds them
// while it lives.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// errHandoff ends the loop of a connection given to Server.Handoff.
var errHandoff = errors.New("connection handed off")

// dateLine is the Date header line of the current second, remade at most
// once a second (two requests that race to remake it make the same line).
var dateLine atomic.Pointer[dateEntry]

type dateEntry struct {
	sec  int64
	line []byte
}

// appendDate appends "Date: <now>\r\n".
func appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	d := dateLine.Load()
	if d == nil || d.sec != sec {
		line := append([]byte("Date: "), now.UTC().AppendFormat(nil, http.TimeFormat)...)
		d = &dateEntry{sec: sec, line: append(line, "\r\n"...)}
		dateLine.Store(d)
	}
	return append(b, d.line...)
}

// RawHandler serves requests from their header fields as read, which
// saves building a header map for the request (and, through
// SetResponseFields, writing one for the response).
type RawHandler interface {
	// ServeRaw serves r, whose Header is empty: its header fields are in
	// h (Host among them). It returns false, having written nothing and
	// kept nothing of r or h, to have the server build r.Header and
	// serve r with Handler instead. h is valid until ServeRaw returns.
	ServeRaw(w http.ResponseWriter, r *http.Request, h *Head) bool
}

// Head is a request head as read: Fields locate the header fields in
// Block, with keys in canonical form.
type Head struct {
	Block  []byte
	Fields []httphead.Field
}
