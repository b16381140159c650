package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// response is a response and its body, allocated together.
type response struct {
	resp http.Response
	body respBody
}

// response builds the response of head h and sets up its body; with no
// body the connection goes back to the pool at once. mustClose: the
// connection cannot carry another request whatever the server says.
// s (nil: none) is where the response is built.
func (c *conn) response(ctx context.Context, req *http.Request, method string, h head, mustClose bool, s *Scratch) (*http.Response, error) {
	hdr := h.header
	var connClose, keepAlive bool
	if h.raw {
		connClose = httphead.FieldsHaveToken(h.block, h.fields, "Connection", "close")
		keepAlive = h.minor == 0 && httphead.FieldsHaveToken(h.block, h.fields, "Connection", "keep-alive")
	} else {
		connClose = httpguts.HeaderValuesContainsToken(hdr["Connection"], "close")
		keepAlive = h.minor == 0 && httpguts.HeaderValuesContainsToken(hdr["Connection"], "keep-alive")
	}
	closing := mustClose || req.Close || connClose
	if h.minor == 0 && !keepAlive {
		closing = true // HTTP/1.0 closes unless told otherwise
	}
	var r *response
	if s != nil {
		r = &s.r
		*r = response{}
	} else {
		r = &response{}
	}
	resp := &r.resp
	resp.Status = h.status
	resp.StatusCode = h.code
	resp.ProtoMajor, resp.ProtoMinor = 1, h.minor
	switch h.minor {
	case 1:
		resp.Proto = "HTTP/1.1"
	case 0:
		resp.Proto = "HTTP/1.0"
	default:
		resp.Proto = fmt.Sprintf("HTTP/1.%d", h.minor)
	}
	resp.Header = hdr
	resp.Request = req
	resp.Close = closing

	if h.code == http.StatusSwitchingProtocols {
		// The connection is the upgraded protocol's now; the caller
		// owns it through the body and ends it with Close.
		if !c.unwatch() {
			c.p.discard(c)
			return nil, fmt.Errorf("read response from %s: %w", c.p.addr, ctxErr(ctx))
		}
		resp.Body = &upgradedBody{c: c}
		return resp, nil
	}

	chunked, tillClose := false, false
	if te, ok := hdr["Transfer-Encoding"]; ok {
		switch {
		case h.minor == 0:
			// Transfer-Encoding in HTTP/1.0 is faulty framing: the body
			// runs to the close (RFC 9112, section 6.1).
			tillClose, closing = true, true
			delete(hdr, "Content-Length")
		case len(te) == 1 && strings.EqualFold(strings.TrimSpace(te[0]), "chunked"):
			chunked = true
			if _, ok := hdr["Content-Length"]; ok {
				// Both: chunked wins, and the connection is not trusted
				// with another request (RFC 9112, section 6.3).
				delete(hdr, "Content-Length")
				closing = true
			}
		default:
			return nil, c.abort(fmt.Errorf("response from %s: unsupported Transfer-Encoding %q: %w", c.p.addr, te, ErrMalformedResponse))
		}
	}
	length := int64(-1)
	if h.raw && h.chunked {
		chunked = true // with no Content-Length (parseFields)
	} else if h.raw {
		n, err := httphead.ContentLength(h.block, h.fields, ErrMalformedResponse)
		if err != nil {
			return nil, c.abort(fmt.Errorf("response from %s: %w", c.p.addr, err))
		}
		length = n
	} else if !chunked && !tillClose {
		n, err := parseContentLength(hdr["Content-Length"])
		if err != nil {
			return nil, c.abort(fmt.Errorf("response from %s: %w", c.p.addr, err))
		}
		length = n
	}
	resp.Close = closing

	noBody := method == http.MethodHead || h.code < 200 || h.code == http.StatusNoContent || h.code == http.StatusNotModified
	switch {
	case noBody || length == 0:
		resp.Body = http.NoBody
		if method == http.MethodHead {
			resp.ContentLength = length // what a GET would have had, if known
		}
		c.finish(!closing)
		return resp, nil
	case chunked:
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"}
		if tr, ok := hdr["Trailer"]; ok {
			resp.Trailer = announcedTrailer(tr)
			delete(hdr, "Trailer")
		}
		r.body = respBody{c: c, ctx: ctx, resp: resp, mode: modeChunked, close: closing, cr: httputil.NewChunkedReader(c.br)}
	case length > 0:
		resp.ContentLength = length
		r.body = respBody{c: c, ctx: ctx, resp: resp, mode: modeLength, n: length, close: closing}
	default:
		resp.ContentLength = -1
		resp.Close = true
		r.body = respBody{c: c, ctx: ctx, resp: resp, mode: modeTillClose, close: true}
	}
	resp.Body = &r.body
	return resp, nil
}

// announcedTrailer makes Response.Trailer from the Trailer header: the
// announced keys with no values until the body's end.
func announcedTrailer(vs []string) http.Header {
	t := http.Header{}
	for _, v := range vs {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			switch k {
			case "", "Transfer-Encoding", "Trailer", "Content-Length":
				continue
			}
			t[k] = nil
		}
	}
	return t
}

// Body framings.
const (
	modeLength    = iota // Content-Length
	modeChunked          // chunked, then trailers
	modeTillClose        // to the end of the connection
)

// States of a body.
const (
	bodyOpen   = iota
	bodyDone   // read to its end or failed; the connection is dealt with
	bodyClosed // closed by the caller
)

// respBody reads a response body from its connection's buffer. At the
// end of the body the connection goes back to the pool; Close before the
// end closes it.
type respBody struct {
	c     *conn
	ctx   context.Context
	resp  *http.Response
	mode  uint8
	close bool      // the connection ends with this body
	n     int64     // modeLength: bytes left
	cr    io.Reader // modeChunked: the chunk decoder
	// state is atomic because Close may come from another goroutine than
	// Read (the connection is closed under a blocked Read).
	state atomic.Uint32
	// err is what reads return after the body is done.
	err error
}

func (b *respBody) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyDone:
		return 0, b.err
	case bodyClosed:
		return 0, http.ErrBodyReadAfterClose
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	switch b.mode {
	case modeLength:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = b.c.br.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			return n, b.end(nil)
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("connection closed with %d bytes of the body left: %w", b.n, io.ErrUnexpectedEOF)
		}
	case modeChunked:
		n, err = b.cr.Read(p)
		if errors.Is(err, io.EOF) {
			if err = b.readTrailer(); err == nil {
				return n, b.end(nil)
			}
		}
	default:
		n, err = b.c.br.Read(p)
		if errors.Is(err, io.EOF) {
			return n, b.end(nil)
		}
	}
	if err != nil {
		return n, b.end(err)
	}
	return n, nil
}

// end finishes the body: with err nil at its end (the result is io.EOF),
// otherwise failed.
func (b *respBody) end(err error) error {
	if !b.state.CompareAndSwap(bodyOpen, bodyDone) {
		return http.ErrBodyReadAfterClose
	}
	c := b.c
	if err == nil {
		b.err = io.EOF
		c.finish(!b.close)
		return io.EOF
	}
	c.unwatch()
	c.p.discard(c)
	if b.ctx.Err() != nil {
		err = ctxErr(b.ctx)
	}
	b.err = fmt.Errorf("read response body from %s: %w", c.p.addr, err)
	return b.err
}

// readTrailer reads the trailer section after the last chunk into the
// response's Trailer.
func (b *respBody) readTrailer() error {
	block, err := b.c.readBlock(b.c.p.t.maxHeaderBytes())
	if err != nil {
		return err
	}
	tr, err := parseTrailer(block)
	if err != nil {
		return err
	}
	if len(tr) > 0 {
		if b.resp.Trailer == nil {
			b.resp.Trailer = tr
		} else {
			for k, vs := range tr {
				b.resp.Trailer[k] = vs
			}
		}
	}
	return nil
}

// Close ends the body. Before its end, the connection is closed: what is
// left of the body would have to be read first.
func (b *respBody) Close() error {
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.c.unwatch()
		b.c.p.discard(b.c)
		return nil
	}
	b.state.CompareAndSwap(bodyDone, bodyClosed)
	return nil
}

// upgradedBody is the body of a 101 Switching Protocols response: the
// connection itself, reading first what the buffer holds.
type upgradedBody struct {
	c      *conn
	closed atomic.Bool
}

func (u *upgradedBody) Read(p []byte) (int, error)  { return u.c.br.Read(p) }
func (u *upgradedBody) Write(p []byte) (int, error) { return u.c.nc.Write(p) }

// Close closes the connection.
func (u *upgradedBody) Close() error {
	if u.closed.CompareAndSwap(false, true) {
		u.c.p.discard(u.c)
	}
	return nil
}

// CloseWrite half-closes the connection, if it can.
func (u *upgradedBody) CloseWrite() error {
	if cw, ok := u.c.nc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
