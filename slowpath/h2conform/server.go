package h2conform

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"

	"golang.org/x/net/http2"
)

const (
	// defaultMaxFrameSize is the SETTINGS_MAX_FRAME_SIZE the server
	// advertises and enforces: the protocol's initial value, so that a
	// larger frame is the FRAME_SIZE_ERROR RFC 9113 §4.2 requires (h2spec
	// http2/4.2/3 sends a 20 KB HEADERS frame, which Go's default of 1 MiB
	// accepts). A 16 KiB DATA frame carries 9 bytes of header, so uploads
	// lose nothing measurable.
	defaultMaxFrameSize = 16384
	// defaultTableSize is HPACK's initial dynamic table size, x/net's
	// default for the decoder.
	defaultTableSize = 4096
)

// Options configure the conformance layer.
type Options struct {
	// StrictPreface closes, without a response, a plaintext connection
	// whose first line is neither an HTTP/1.x request line nor the HTTP/2
	// preface: on a port serving HTTP/1.x and HTTP/2 with prior knowledge
	// that is an invalid HTTP/2 preface too, which RFC 9113 §3.4 (and
	// h2spec case http2/3.5/2) wants closed. False: net/http answers it
	// 400 Bad Request as HTTP/1.1 (RFC 9112 §3). A connection that starts
	// the HTTP/2 preface and breaks off is closed either way.
	StrictPreface bool
}

// Configure makes srv serve HTTP/2 with golang.org/x/net/http2's server
// behind the conformance filter, and returns ln wrapped to filter
// plaintext connections. Call it before srv serves, and serve the
// returned listener. ln may return *tls.Conn connections (which net/http
// then handshakes, serving HTTP/2 when ALPN picks "h2") and plaintext
// ones (served as HTTP/1.x, or as HTTP/2 with prior knowledge when
// srv.Protocols allows unencrypted HTTP/2).
//
// Configure gives srv an HTTP2 configuration of its own, a copy of the
// one it has, with MaxReadFrameSize 16384 unless that is set (and
// MaxDecoderHeaderTableSize, which the filter must know, spelled out).
//
// x/net deprecates its server in favour of net/http's, which cannot serve
// the filter's wrapper: it takes HTTP/2 over TLS only as a *tls.Conn.
// Under Go 1.26 x/net's server is a complete implementation of its own;
// from Go 1.27 it runs net/http's, and this package's tests say whether
// that still conforms.
//
// srv.ConnState sees the states of an HTTP/2-over-TLS connection under the
// wrapper the HTTP/2 server is given, not under the *tls.Conn net/http
// accepted: net/http hands that one over in state New, so Configure
// reports it StateHijacked at the handover (net/http still reports
// StateClosed for it at the end) and the wrapper StateClosed when the
// HTTP/2 server is done with it. Plaintext connections are wrapped from
// accept on and keep one identity.
func Configure(srv *http.Server, ln net.Listener, opts Options) (net.Listener, error) {
	var conf http.HTTP2Config
	if srv.HTTP2 != nil {
		conf = *srv.HTTP2
	}
	if conf.MaxReadFrameSize == 0 {
		conf.MaxReadFrameSize = defaultMaxFrameSize
	}
	if conf.MaxDecoderHeaderTableSize == 0 {
		conf.MaxDecoderHeaderTableSize = defaultTableSize
	}
	srv.HTTP2 = &conf
	h2 := new(http2.Server)                                //nolint:staticcheck // SA1019: see above
	if err := http2.ConfigureServer(srv, h2); err != nil { //nolint:staticcheck // SA1019: see above
		return nil, fmt.Errorf("configure http/2 server: %w", err)
	}
	srv.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, tc *tls.Conn, h http.Handler) {
		serveTLS(h2, hs, tc, h)
	}
	sniff := srv.Protocols != nil && srv.Protocols.UnencryptedHTTP2()
	return &listener{Listener: ln, srv: srv, sniff: sniff, strict: opts.StrictPreface}, nil
}

// serveTLS serves an HTTP/2 connection negotiated by ALPN, as x/net's own
// handler does, with the filter in front.
func serveTLS(h2 *http2.Server, hs *http.Server, tc *tls.Conn, h http.Handler) { //nolint:staticcheck // SA1019: see Configure
	c := &tlsConn{Conn: tc}
	c.f.init(tc, modePreface, paramsOf(hs, false))
	c.w.init(tc)
	if hs.ConnState != nil {
		hs.ConnState(tc, http.StateHijacked)
		defer hs.ConnState(c, http.StateClosed)
	}
	// net/http passes its per-connection base context on the handler.
	var ctx context.Context
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		ctx = bc.BaseContext()
	}
	h2.ServeConn(c, &http2.ServeConnOpts{Context: ctx, BaseConfig: hs, Handler: h}) //nolint:staticcheck // SA1019: see Configure
}

// listener wraps plaintext connections in the filter when they may speak
// HTTP/2 with prior knowledge.
type listener struct {
	net.Listener
	srv    *http.Server
	sniff  bool
	strict bool
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, isTLS := c.(*tls.Conn); isTLS || !l.sniff {
		return c, nil
	}
	pc := &plainConn{Conn: c}
	pc.f.init(c, modeSniff, paramsOf(l.srv, l.strict))
	pc.w.init(c)
	return pc, nil
}

// paramsOf works out the settings x/net's server derives from hs
// (x/net's configFromServer), hs.HTTP2 being set by Configure.
func paramsOf(hs *http.Server, strictPreface bool) params {
	p := params{maxFrame: defaultMaxFrameSize, tableSize: defaultTableSize, strictPreface: strictPreface}
	if c := hs.HTTP2; c != nil {
		p.maxFrame = c.MaxReadFrameSize
		p.tableSize = uint32(c.MaxDecoderHeaderTableSize)
	}
	if p.maxFrame < defaultMaxFrameSize || p.maxFrame > 1<<24-1 {
		p.maxFrame = 1 << 20 // x/net's default for out-of-range values
	}
	if p.tableSize < 1 {
		p.tableSize = defaultTableSize
	}
	// The server's header list limit, which is also its HPACK string
	// limit (x/net serverConn.maxHeaderListSize).
	n := int64(hs.MaxHeaderBytes)
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	n += 10 * 32
	p.maxString = int(min(n, math.MaxUint32))
	return p
}
