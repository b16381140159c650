package compress

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Compressor compresses responses under one Config. It is immutable and safe
// for concurrent use.
type Compressor struct {
	prefs   []algorithm
	minSize int
	types   []string
	pools   [numAlgorithms]*sync.Pool // nil for algorithms not configured
}

// New validates cfg, applies its defaults and returns a Compressor.
func New(cfg Config) (*Compressor, error) {
	cc, err := cfg.compile("")
	if err != nil {
		return nil, err
	}
	c := &Compressor{prefs: cc.prefs, minSize: cc.minSize, types: cc.types}
	for _, a := range cc.prefs {
		p, err := poolFor(a, cc.levels[a])
		if err != nil {
			return nil, fmt.Errorf("%v level %d: %w: %w", a, cc.levels[a], err, ErrInvalidConfig)
		}
		c.pools[a] = p
	}
	return c, nil
}

// Wrap returns a ResponseWriter that compresses the response if and only if
// it should be compressed (see the package documentation), and a finish func
// that the caller must call once, after the handler has returned and before
// the request is done: it writes out what is still buffered, closes the
// encoder and returns it to its pool. finish reports the error of those last
// writes; a second call does nothing.
//
// The returned writer implements http.Flusher, http.Hijacker and Unwrap
// (for http.ResponseController); like any ResponseWriter it must not be used
// from two goroutines at once nor after finish.
func (c *Compressor) Wrap(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func() error) {
	rw := &responseWriter{w: w, c: c}
	// HEAD gets the GET headers (Vary) but nothing is compressed; a range
	// request refers to the identity body's bytes.
	if r.Method != http.MethodHead && r.Header.Get("Range") == "" {
		acc := parseAcceptEncoding(r.Header["Accept-Encoding"])
		rw.alg, rw.accepted = acc.choose(c.prefs)
	}
	return rw, rw.finish
}

// state is where a responseWriter is in deciding and writing a response.
type state uint8

const (
	// stateInit: no final status yet.
	stateInit state = iota
	// stateBuffering: status recorded, body of unknown length buffered in
	// buf; nothing sent to w yet.
	stateBuffering
	// stateCompressing: headers sent; body goes through enc.
	stateCompressing
	// stateIdentity: headers sent (or left to w); body goes to w as is.
	stateIdentity
	// stateHijacked: the connection was taken over.
	stateHijacked
	// stateFinished: finish has run.
	stateFinished
)

// errFinished is returned for writes after finish.
var errFinished = errors.New("compress: write after the response was finished")

// errHijackCompressing is returned by Hijack once compressed output started.
var errHijackCompressing = errors.New("compress: hijack of a response that is being compressed")

// responseWriter is the writer that Wrap returns.
type responseWriter struct {
	w        http.ResponseWriter
	c        *Compressor
	alg      algorithm
	accepted bool // the request allows alg
	state    state
	status   int
	// flushEach makes every write flush (server-sent events).
	flushEach bool
	buf       *[]byte
	enc       *pooledEncoder
}

var (
	_ http.ResponseWriter = (*responseWriter)(nil)
	_ http.Flusher        = (*responseWriter)(nil)
	_ http.Hijacker       = (*responseWriter)(nil)
)

// Header returns the wrapped writer's header map: headers, trailers declared
// with "Trailer" and http.TrailerPrefix keys all pass through unchanged.
func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

// Unwrap returns the wrapped writer, for http.ResponseController (deadlines,
// full duplex).
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// WriteHeader records the final status and decides what it can: informational
// (1xx) statuses other than 101 are passed through at once.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.state != stateInit {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		rw.w.WriteHeader(code)
		return
	}
	rw.status = code
	rw.decide()
}

// decide makes the decision that the headers allow, at the final status.
func (rw *responseWriter) decide() {
	h := rw.w.Header()
	if !rw.c.eligible(rw.status, h) {
		rw.sendIdentityHeader()
		return
	}
	// The response would be compressed for some Accept-Encoding: caches must
	// know that the representation depends on it.
	addVary(h)
	if !rw.accepted {
		rw.sendIdentityHeader()
		return
	}
	if cl := h.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil {
			if n < int64(rw.c.minSize) {
				rw.sendIdentityHeader()
			} else {
				rw.startCompressing()
			}
			return
		}
	}
	if isEventStream(h.Get("Content-Type")) {
		rw.flushEach = true
		rw.startCompressing()
		return
	}
	if _, ok := h["Trailer"]; ok {
		// Declared trailer values are set in the header map after the body;
		// buffering would send the header late and leak them into it.
		rw.startCompressing()
		return
	}
	rw.state = stateBuffering
}

func (rw *responseWriter) sendIdentityHeader() {
	rw.state = stateIdentity
	rw.w.WriteHeader(rw.status)
}

func (rw *responseWriter) startCompressing() {
	h := rw.w.Header()
	h.Del("Content-Length")
	// Byte ranges would refer to the compressed bytes, which differ from
	// one response to the next.
	h.Del("Accept-Ranges")
	h.Set("Content-Encoding", rw.alg.String())
	if etag := h.Get("Etag"); etag != "" && !strings.HasPrefix(etag, "W/") {
		// The compressed bytes are not the identity bytes the strong tag
		// names; a weak tag stays valid for conditional requests.
		h.Set("Etag", "W/"+etag)
	}
	rw.w.WriteHeader(rw.status)
	rw.enc = getEncoder(rw.c.pools[rw.alg], rw.w)
	rw.state = stateCompressing
}

// Write writes body bytes: as they are, buffered, or compressed.
func (rw *responseWriter) Write(p []byte) (int, error) {
	if rw.state == stateInit {
		rw.WriteHeader(http.StatusOK)
	}
	switch rw.state {
	case stateIdentity:
		return rw.w.Write(p)
	case stateBuffering:
		if rw.buf == nil {
			if len(p) >= rw.c.minSize {
				// Big enough on its own: no copy.
				rw.startCompressing()
				return rw.writeCompressed(p)
			}
			rw.buf = bufPool.Get().(*[]byte)
		}
		if len(*rw.buf)+len(p) < rw.c.minSize {
			*rw.buf = append(*rw.buf, p...)
			return len(p), nil
		}
		rw.startCompressing()
		if err := rw.drainBuffer(); err != nil {
			return 0, err
		}
		return rw.writeCompressed(p)
	case stateCompressing:
		return rw.writeCompressed(p)
	case stateHijacked:
		return 0, http.ErrHijacked
	default:
		return 0, errFinished
	}
}

func (rw *responseWriter) writeCompressed(p []byte) (int, error) {
	n, err := rw.enc.enc.Write(p)
	if err != nil {
		return n, fmt.Errorf("%v encode: %w", rw.alg, err)
	}
	if rw.flushEach {
		if err := rw.FlushError(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return n, err
		}
	}
	return n, nil
}

// drainBuffer sends the buffered bytes to the current sink (the encoder or
// w) and releases the buffer.
func (rw *responseWriter) drainBuffer() error {
	if rw.buf == nil {
		return nil
	}
	b := *rw.buf
	var err error
	if len(b) > 0 {
		if rw.state == stateCompressing {
			_, err = rw.enc.enc.Write(b)
			if err != nil {
				err = fmt.Errorf("%v encode: %w", rw.alg, err)
			}
		} else {
			_, err = rw.w.Write(b)
		}
	}
	if cap(b) <= maxPooledBuf {
		*rw.buf = b[:0]
		bufPool.Put(rw.buf)
	}
	rw.buf = nil
	return err
}

// Flush implements http.Flusher.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError flushes the encoder and the wrapped writer, sending everything
// written so far to the client. A flush while the body is still being
// buffered ends the buffering in favour of compression: the response is a
// stream. http.ResponseController uses this method.
func (rw *responseWriter) FlushError() error {
	if rw.state == stateInit {
		rw.WriteHeader(http.StatusOK)
	}
	switch rw.state {
	case stateBuffering:
		rw.startCompressing()
		if err := rw.drainBuffer(); err != nil {
			return err
		}
		fallthrough
	case stateCompressing:
		if err := rw.enc.enc.Flush(); err != nil {
			return fmt.Errorf("%v flush: %w", rw.alg, err)
		}
	case stateHijacked:
		return http.ErrHijacked
	case stateFinished:
		return errFinished
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack implements http.Hijacker for protocol upgrades (101), which are
// never compressed. Buffered body bytes are sent first, as net/http does;
// a response already being compressed cannot be hijacked.
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	switch rw.state {
	case stateBuffering:
		rw.state = stateIdentity
		rw.w.WriteHeader(rw.status)
		if err := rw.drainBuffer(); err != nil {
			return nil, nil, err
		}
	case stateCompressing:
		return nil, nil, errHijackCompressing
	case stateHijacked:
		return nil, nil, http.ErrHijacked
	case stateFinished:
		return nil, nil, errFinished
	}
	conn, brw, err := http.NewResponseController(rw.w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	rw.state = stateHijacked
	return conn, brw, nil
}

// finish ends the response: a response never written is sent as an empty
// 200, as net/http would; a body still buffered was smaller than MinSize and
// is sent as it is; a compressed stream is closed.
func (rw *responseWriter) finish() error {
	if rw.state == stateInit {
		// A handler that wrote nothing sends 200 with its headers (a HEAD
		// handler typically): those headers still get Vary.
		rw.WriteHeader(http.StatusOK)
	}
	var err error
	switch rw.state {
	case stateBuffering:
		rw.state = stateIdentity
		rw.w.WriteHeader(rw.status)
		err = rw.drainBuffer()
	case stateCompressing:
		if cerr := rw.enc.enc.Close(); cerr != nil {
			err = fmt.Errorf("%v close: %w", rw.alg, cerr)
		}
		putEncoder(rw.c.pools[rw.alg], rw.enc)
		rw.enc = nil
	}
	rw.state = stateFinished
	return err
}

// eligible reports whether a response with this status and these headers
// would be compressed for a client that accepts a configured coding.
func (c *Compressor) eligible(status int, h http.Header) bool {
	switch {
	case status < 200,
		status == http.StatusNoContent,
		status == http.StatusPartialContent,
		status == http.StatusNotModified:
		return false
	}
	if h.Get("Content-Encoding") != "" {
		return false
	}
	for _, v := range h["Cache-Control"] {
		if hasToken(v, "no-transform") {
			return false
		}
	}
	mt := mediaType(h.Get("Content-Type"))
	if mt == "" || hasPrefixFold(mt, "application/grpc") {
		return false
	}
	for _, p := range c.types {
		if hasPrefixFold(mt, p) {
			return true
		}
	}
	return false
}

// mediaType is the type/subtype of a Content-Type value, without parameters
// or surrounding whitespace, in its original case.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return trimOWS(ct)
}

func isEventStream(ct string) bool {
	return strings.EqualFold(mediaType(ct), "text/event-stream")
}

// hasPrefixFold is strings.HasPrefix ignoring ASCII case; prefix is lower
// case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// hasToken reports whether the comma-separated list v holds token (compared
// ignoring case; a directive's "=value" is ignored).
func hasToken(v, token string) bool {
	for len(v) > 0 {
		var item string
		if i := strings.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, ""
		}
		if i := strings.IndexByte(item, '='); i >= 0 {
			item = item[:i]
		}
		if strings.EqualFold(trimOWS(item), token) {
			return true
		}
	}
	return false
}

// addVary adds Accept-Encoding to Vary unless it, or "*", is there already.
func addVary(h http.Header) {
	for _, v := range h["Vary"] {
		if hasToken(v, "Accept-Encoding") || hasToken(v, "*") {
			return
		}
	}
	h.Add("Vary", "Accept-Encoding")
}
