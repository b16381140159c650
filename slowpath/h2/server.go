package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/workpool"
)

// Server serves HTTP/2 connections handed to it by ServeConn. Its fields
// must not change once the first connection is served.
type Server struct {
	// Handler answers every request; it must not be nil.
	Handler http.Handler
	// MaxConcurrentStreams is advertised to clients; a stream beyond it
	// (counting streams whose handler still runs) is refused with
	// REFUSED_STREAM. Zero means 250.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a request's header list (the HPACK-decoded
	// size, RFC 9113 §6.5.2); zero means http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// IdleTimeout closes (GOAWAY, then close) a connection that has had
	// no open stream for this long; zero means never.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the wait for the client preface and its
	// first SETTINGS frame; zero means no bound.
	ReadHeaderTimeout time.Duration
	// SendTimeout closes a connection whose client takes none of what is
	// written to it for this long (slow-read protection: flow control
	// bounds what a stream may send, not whether the client reads its
	// socket); zero means no bound.
	SendTimeout time.Duration
	// Log receives handler panics and connection errors worth a look;
	// nil means slog.Default().
	Log *slog.Logger
	// ReuseRequestHeader says the handler uses a request's Header (the
	// map and its value slices) only until ServeHTTP returns, as the
	// HTTP/1.1 server requires of every handler: the map and its values'
	// backing array are then kept with the stream for the next request,
	// two allocations and the map's growth less per request. The proxy
	// sets it; a handler that reads the request later (grpc-go's
	// ServeHTTP reads its context) must not.
	ReuseRequestHeader bool
	// Raw, when set, is offered each request (but CONNECT and requests
	// declaring trailers) with its header fields as decoded, before its
	// Header map is built (see RawHandler).
	Raw RawHandler

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
	initOnce sync.Once
	pool     *workpool.Pool
}

// ConnOptions describes how a connection reached ServeConn.
type ConnOptions struct {
	// Context is the base context of every request on the connection;
	// nil means context.Background().
	Context context.Context
	// TLS is the connection's TLS state for h2 over TLS (r.TLS); nil for
	// h2c.
	TLS *tls.ConnectionState
	// UpgradeRequest, for h2c Upgrade (RFC 7540 §3.2), is the HTTP/1.1
	// request the caller answered with 101 Switching Protocols: it
	// becomes stream 1, half-closed (remote). Its Body, if any, is the
	// stream's request body (the caller reads it off the HTTP/1.1
	// connection first). The client preface follows on c.
	UpgradeRequest *http.Request
	// Settings is the decoded HTTP2-Settings payload of the upgrade
	// request, applied as the client's first SETTINGS (not acknowledged).
	Settings []byte
}

// Defaults for the zero values of Server's fields and the windows the
// server advertises.
const (
	defaultMaxStreams = 250
	// streamWindow is the receive window per stream: the most request
	// body bytes buffered for a handler that does not read.
	streamWindow = 1 << 20
	// connWindow is the receive window of a connection, across streams.
	connWindow = 16 << 20
	// maxFrameSize is the SETTINGS_MAX_FRAME_SIZE advertised: the
	// protocol's initial value, so that an oversized frame is the error
	// RFC 9113 §4.2 asks for.
	maxFrameSize = 16384
)

// ErrServerClosed is what ServeConn's connections see once Close or
// Shutdown ran.
var ErrServerClosed = errors.New("h2: server closed")

func (s *Server) init() {
	s.initOnce.Do(func() {
		// Workers keep the stacks the proxy's handlers grow; a burst of
		// streams beyond the pool runs on plain goroutines.
		s.pool = workpool.New(4096, 64, 30*time.Second)
	})
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return defaultMaxStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) maxHeaderBytes() uint32 {
	if s.MaxHeaderBytes <= 0 {
		return http.DefaultMaxHeaderBytes
	}
	return uint32(s.MaxHeaderBytes)
}

func (s *Server) logger() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// ServeConn serves HTTP/2 on c until the connection ends and every
// handler started for it has returned; it closes c. For h2 over TLS, c is
// the *tls.Conn after its handshake negotiated "h2"; for h2c, c starts
// with the client preface (or, for an Upgrade, follows the 101 response).
func (s *Server) ServeConn(c net.Conn, o ConnOptions) {
	s.init()
	cc := newConn(s, c, o)
	cc.start()
	s.mu.Lock()
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[cc] = struct{}{}
	shutdown := s.shutdown
	s.mu.Unlock()
	if shutdown {
		// Handed over after Shutdown began (the HTTP/1.x server read its
		// preface just then): GOAWAY before any stream, so the client
		// learns that none was processed and sends its requests again
		// elsewhere, rather than seeing the connection drop.
		cc.goAwayGraceful()
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, cc)
		s.mu.Unlock()
	}()
	cc.serve()
}

// Active returns how many connections have at least one open stream (or a
// handler still running): what a drain waits for.
func (s *Server) Active() int {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		if c.active > 0 {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

func (s *Server) snapshot(shutdown bool) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shutdown {
		s.shutdown = true
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// Shutdown stops the server gracefully: every connection gets a GOAWAY
// naming the last stream it will process, its open streams run to their
// end, and it closes once it has none. Shutdown returns when every
// connection has ended, or ctx's error when ctx ends first (the
// connections then keep draining; Close ends them).
func (s *Server) Shutdown(ctx context.Context) error {
	for _, c := range s.snapshot(true) {
		c.goAwayGraceful()
	}
	// Connections end on their own; poll like net/http's Shutdown does,
	// starting fast so a quick drain returns quickly.
	wait := time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
		t.Reset(wait)
	}
}

// Close closes every connection at once; their handlers see their
// contexts canceled, and ServeConn returns once they have returned.
func (s *Server) Close() error {
	for _, c := range s.snapshot(true) {
		c.closeNow(ErrServerClosed)
	}
	return nil
}

// RawHandler serves requests from their header fields as decoded, which
// saves building a header map for the request (and, through
// SetResponseFields, encoding one for the response).
type RawHandler interface {
	// ServeRaw serves r, whose Header is empty: its regular header
	// fields (lower-case names, in the order received, a split cookie
	// as several fields, Host among them if the client sent one; checked
	// as RFC 9113 asks) are fields. It returns false, having written
	// nothing and kept nothing of r or fields, to have the server build
	// r.Header and serve r with Handler instead. fields is valid until
	// ServeRaw returns; its strings may be kept.
	ServeRaw(w http.ResponseWriter, r *http.Request, fields []hpack.HeaderField) bool
}
