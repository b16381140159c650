package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// Defaults for zero Transport fields, and fixed sizes.
const (
	// DefaultMaxIdleConnsPerHost is the idle connections kept per endpoint
	// when Transport.MaxIdleConnsPerHost is zero.
	DefaultMaxIdleConnsPerHost = 256
	// DefaultMaxResponseHeaderBytes bounds a response head (status line and
	// header fields, or trailers) when Transport.MaxResponseHeaderBytes is
	// zero.
	DefaultMaxResponseHeaderBytes = 1 << 20

	readBufSize  = 4 << 10
	writeBufSize = 4 << 10
	// max1xx bounds the informational responses before the final one.
	max1xx = 16
	// earlyResponseWait is how long a request whose body could not be
	// written looks for a response the server sent before it stopped
	// reading (a 413, say), which is better to pass on than the write
	// error.
	earlyResponseWait = 250 * time.Millisecond
)

// Errors callers may test with errors.Is.
var (
	// ErrMalformedResponse is wrapped by every error about a response that
	// does not parse as HTTP/1.x.
	ErrMalformedResponse = errors.New("malformed HTTP response")
	// ErrResponseHeaderTimeout is returned when ResponseHeaderTimeout
	// passes before the response head arrived.
	ErrResponseHeaderTimeout = errors.New("timeout awaiting response headers")
	// ErrBodyTooShort is returned when a request body ends before its
	// Content-Length.
	ErrBodyTooShort = errors.New("request body shorter than its Content-Length")
)

// Transport is an http.RoundTripper for plain-text HTTP/1.1 upstreams
// (URL scheme "http"). It keeps a pool of keep-alive connections per
// endpoint address (URL.Host). It sends the request's header fields as
// they are and adds none of its own (no User-Agent, no Accept-Encoding; an
// empty User-Agent, httputil.ReverseProxy's way of asking for none, is
// left out). The zero value is ready to use; fields must not change after
// the first request. It is safe for concurrent use.
type Transport struct {
	// DialContext opens connections. If nil, a net.Dialer with
	// DialTimeout and 30 s TCP keep-alives is used.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a dial of the default dialer; zero means only the
	// request's context bounds it.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head once the
	// request is written; zero means no limit but the request's context.
	ResponseHeaderTimeout time.Duration
	// ExpectContinueTimeout is how long a request with a body and
	// "Expect: 100-continue" waits for the server's 100 Continue before
	// sending the body anyway; zero sends the body at once.
	ExpectContinueTimeout time.Duration
	// IdleConnTimeout closes connections idle for longer; zero keeps them
	// until the server closes them or CloseIdleConnections.
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost bounds the idle connections kept per endpoint;
	// zero means DefaultMaxIdleConnsPerHost, negative keeps none.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost bounds the connections per endpoint, open or being
	// dialed; requests beyond it wait for one to become free. Zero means
	// no limit.
	MaxConnsPerHost int
	// MaxResponseHeaderBytes bounds a response head; zero means
	// DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int

	pools sync.Map // endpoint address → *hostPool
}

var _ http.RoundTripper = (*Transport)(nil)

// Got1xx receives an informational (1xx) response head before the final
// one, as httptrace.ClientTrace.Got1xxResponse does; an error ends the
// exchange with it.
type Got1xx func(code int, header textproto.MIMEHeader) error

// RoundTrip sends req on a pooled or new connection to req.URL.Host and
// returns the response head; the body streams from the connection. As
// http.RoundTripper requires, req is not modified and req.Body is always
// closed. Closing the response body before its end closes the connection.
// Informational responses go to the Got1xxResponse of an
// httptrace.ClientTrace in req's context, if there is one.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripGot1xx(req, nil)
}

// RoundTripGot1xx is RoundTrip with got1xx (if not nil) receiving the
// informational responses instead of a trace in req's context, which
// would cost its caller a context and a copy of the request.
func (t *Transport) RoundTripGot1xx(req *http.Request, got1xx Got1xx) (*http.Response, error) {
	return t.RoundTripScratch(req, got1xx, nil)
}

// Scratch is room for a response that its owner lends the client, one
// exchange at a time, so that the response and its header map need no
// allocation of their own (a map and its growth were a third of the
// allocations of a proxied request). The zero value is ready to use.
//
// A Scratch also carries what lets a proxy skip header maps altogether
// (its raw request path): request header fields kept as the client sent
// them (SetRequestFields), and a request for the response's fields as read
// (WantFields, then Fields).
type Scratch struct {
	r      response
	header http.Header

	reqBlock  []byte
	reqFields []httphead.Field
	reqLines  []byte

	wantFields bool
	// fields of the current response, when it was parsed into them: the
	// head is copied into block, since the connection's buffer is reused
	// by the body's reads.
	hasFields bool
	block     []byte
	fields    []httphead.Field
}

// Clear drops what s refers to from its last response (the connection,
// the request), so that a kept Scratch holds nothing alive. The requests
// set by SetRequestFields and WantFields end too.
func (s *Scratch) Clear() {
	s.r = response{}
	if len(s.header) > 0 {
		clear(s.header)
	}
	s.reqBlock, s.reqFields, s.reqLines = nil, nil, nil
	s.wantFields, s.hasFields = false, false
	s.block, s.fields = s.block[:0], s.fields[:0]
}

// SetRequestFields adds header fields to the requests sent with s: fields
// of block, sent as they are after the request's Header (which must not
// hold the same names). They must be valid (httphead.ScanFields checked
// them) and end-to-end; Host, Content-Length and Transfer-Encoding must
// not be among them. block must stay unchanged until the exchange ends.
func (s *Scratch) SetRequestFields(block []byte, fields []httphead.Field) {
	s.reqBlock, s.reqFields = block, fields
}

// SetRequestLines adds header lines to the requests sent with s, after
// the fields of SetRequestFields: complete, valid "Name: value\r\n" lines
// with the same restrictions. lines must stay unchanged until the
// exchange ends.
func (s *Scratch) SetRequestLines(lines []byte) { s.reqLines = lines }

// WantFields asks for the response head's fields as read rather than a
// header map. The client gives them when the head allows (a final
// response without Transfer-Encoding, Trailer or folded lines); the
// response's Header is empty then, and Fields returns them.
func (s *Scratch) WantFields() { s.wantFields = true }

// Fields returns the header fields of the response built in s and the
// head they index, when the response was given as fields (ok). They stay
// valid until s is used again or cleared.
func (s *Scratch) Fields() (block []byte, fields []httphead.Field, ok bool) {
	return s.block, s.fields, s.hasFields
}

// BuildHeader fills the response's Header from its fields (a response
// given as fields whose owner needs the map after all) and returns it.
func (s *Scratch) BuildHeader() http.Header {
	if !s.hasFields {
		return s.r.resp.Header
	}
	s.hasFields = false
	h, _ := httphead.BuildHeader(s.header, nil, string(s.block), s.block, s.fields, commonKeys)
	s.header = h
	s.r.resp.Header = h
	return h
}

// RoundTripScratch is RoundTripGot1xx building the response in s (if not
// nil). The response, and its Header map, are valid until s is used
// again: its owner must be done with them, the body closed, by then. The
// header's values (slices and strings) are not in s and stay valid, so
// they may be copied into another map by reference.
func (t *Transport) RoundTripScratch(req *http.Request, got1xx Got1xx, s *Scratch) (*http.Response, error) {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	addr, host, err := target(req)
	if err == nil {
		err = validHeaders(req.Header)
	}
	if err == nil && req.Trailer != nil {
		err = validHeaders(req.Trailer)
	}
	if err != nil {
		closeBody(body)
		return nil, err
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		closeBody(body)
		return nil, ctxErr(ctx)
	}
	replay := replayable(req) || body == nil && s != nil && idempotencyKey(s.reqBlock, s.reqFields)
	for attempt := 0; ; attempt++ {
		// A request that cannot be sent again checks a reused connection
		// before writing to it, as does every second attempt.
		c, err := t.getConn(ctx, addr, !replay || attempt > 0)
		if err != nil {
			closeBody(body)
			return nil, err
		}
		resp, err := c.roundTrip(ctx, req, host, body, got1xx, s)
		if err == nil {
			closeBody(body) // written, or not wanted by the server
			return resp, nil
		}
		var xe *exchangeError
		if !errors.As(err, &xe) || !c.reused || ctx.Err() != nil || !xe.retriable(replay) || attempt >= maxAttempts {
			closeBody(body)
			return nil, err
		}
		if body != nil {
			closeBody(body)
			if req.GetBody == nil {
				return nil, err
			}
			if body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("rewind request body for a retry: %w", err)
			}
			if body == http.NoBody {
				body = nil
			}
		}
	}
}

// maxAttempts bounds the retries on reused connections; each retry takes
// another idle connection or dials, and from the second try on idle
// connections are checked first, so this is rarely reached.
const maxAttempts = 4

// CloseIdleConnections closes the idle connections of every endpoint.
// Connections in use are not affected; they are kept when their exchange
// ends, until IdleConnTimeout or the next CloseIdleConnections.
func (t *Transport) CloseIdleConnections() {
	t.pools.Range(func(_, v any) bool {
		v.(*hostPool).closeIdle()
		return true
	})
}

// IdleConns returns the number of idle connections to addr, for tests and
// metrics.
func (t *Transport) IdleConns(addr string) int {
	v, ok := t.pools.Load(addr)
	if !ok {
		return 0
	}
	p := v.(*hostPool)
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (t *Transport) maxIdle() int {
	switch {
	case t.MaxIdleConnsPerHost == 0:
		return DefaultMaxIdleConnsPerHost
	case t.MaxIdleConnsPerHost < 0:
		return 0
	}
	return t.MaxIdleConnsPerHost
}

func (t *Transport) maxHeaderBytes() int {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return DefaultMaxResponseHeaderBytes
}

func (t *Transport) dial(ctx context.Context, addr string) (net.Conn, error) {
	if t.DialContext != nil {
		return t.DialContext(ctx, "tcp", addr)
	}
	d := net.Dialer{Timeout: t.DialTimeout, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// target returns the address to dial and the Host header of req.
func target(req *http.Request) (addr, host string, err error) {
	u := req.URL
	if u == nil {
		return "", "", errors.New("upstream: request has no URL")
	}
	if u.Scheme != "http" {
		return "", "", fmt.Errorf("upstream: unsupported scheme %q (only plain-text http)", u.Scheme)
	}
	addr = u.Host
	if addr == "" {
		return "", "", errors.New("upstream: request URL has no host")
	}
	if strings.LastIndexByte(addr, ':') <= strings.LastIndexByte(addr, ']') {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), "80")
	}
	host = req.Host
	if host == "" {
		host = u.Host
	}
	if !httpguts.ValidHostHeader(host) {
		return "", "", fmt.Errorf("upstream: invalid Host header %q", host)
	}
	if m := req.Method; m != "" && !validToken(m) {
		return "", "", fmt.Errorf("upstream: invalid method %q", m)
	}
	if hasCTLOrSpace(u.RawQuery) || hasCTLOrSpace(u.Opaque) || hasCTLOrSpace(u.RawPath) {
		return "", "", errors.New("upstream: control character or space in the request URL")
	}
	return addr, host, nil
}

func validHeaders(h http.Header) error {
	if len(h) == 0 {
		return nil // ranging over an empty map is not free
	}
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("upstream: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("upstream: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// replayable reports whether req may be sent again after a failure on a
// reused connection in which the server may have seen it: its body can be
// had again and its method is safe, or it carries an idempotency key (the
// rules of net/http's Transport).
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// idempotencyKey reports whether fields carry an idempotency key, which
// makes a request replayable (see replayable).
func idempotencyKey(block []byte, fields []httphead.Field) bool {
	for _, f := range fields {
		if f.Is(block, "Idempotency-Key") || f.Is(block, "X-Idempotency-Key") {
			return true
		}
	}
	return false
}

func closeBody(b io.ReadCloser) {
	if b != nil {
		_ = b.Close()
	}
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

func hasCTLOrSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

// exchangeError is an error of one exchange on one connection, with what
// the server can have seen of the request.
type exchangeError struct {
	err error
	// nothingWritten: no byte of the request reached the connection.
	nothingWritten bool
	// nothingRead: no byte of a response arrived (the connection failed
	// before the server answered).
	nothingRead bool
}

func (e *exchangeError) Error() string { return e.err.Error() }
func (e *exchangeError) Unwrap() error { return e.err }

// retriable reports whether the request may go out again on another
// connection after this error on a reused one.
func (e *exchangeError) retriable(replayable bool) bool {
	return e.nothingWritten || (e.nothingRead && replayable)
}

// canceledError reports a request ended by its context: errors.Is finds
// the context's error (context.Canceled or DeadlineExceeded) and its cause.
type canceledError struct {
	err, cause error
}

func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return &canceledError{err: err, cause: cause}
	}
	return err
}

func (e *canceledError) Error() string   { return e.err.Error() + " (" + e.cause.Error() + ")" }
func (e *canceledError) Unwrap() []error { return []error{e.err, e.cause} }
