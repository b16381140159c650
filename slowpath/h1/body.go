package h1

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// maxDrain is how much of an unread request body the server reads past to
// keep the connection (net/http's figure).
const maxDrain = 256 << 10

// errBodyClosed is what a body read after its request ended returns.
var errBodyClosed = errors.New("http: invalid Read on closed Body")

// body is a request body read from its connection. It is made per request
// (a reader that outlived its request must not read the next one's), and
// its mutex orders a reader still running against the server's drain.
type body struct {
	mu        sync.Mutex
	c         *conn
	r         *http.Request
	n         int64     // bytes left; -1: chunked
	cr        io.Reader // chunk decoder
	expect100 bool      // "100 Continue" still to be sent on the first read
	eof       bool
	closed    bool
	err       error
}

func (c *conn) newBody(r *http.Request, n int64) *body {
	b := &body{c: c, r: r, n: n}
	c.body = b
	if n < 0 {
		b.cr = httputil.NewChunkedReader(c.br)
	}
	if vs := r.Header["Expect"]; len(vs) > 0 {
		// net/http answers other expectations 417; so does the handler
		// here, which sees the header: only 100-continue is acted upon.
		b.expect100 = r.ProtoMinor == 1 && httpguts.HeaderValuesContainsToken(vs, "100-continue")
	}
	return b
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.expect100 {
		b.expect100 = false
		if !b.c.w.wroteHeader {
			if err := b.c.writeContinue(); err != nil {
				b.err = err
				return 0, err
			}
		}
	}
	var n int
	var err error
	if b.n >= 0 {
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = b.c.br.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			b.eof = true
			return n, io.EOF
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("client closed the connection with %d bytes of the request body left: %w", b.n, io.ErrUnexpectedEOF)
		}
	} else {
		n, err = b.cr.Read(p)
		if errors.Is(err, io.EOF) {
			if err = b.readTrailer(); err == nil {
				b.eof = true
				return n, io.EOF
			}
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// readTrailer reads the trailer section after the last chunk into the
// request's Trailer.
func (b *body) readTrailer() error {
	block, err := httphead.ReadBlock(b.c.br, b.c.s.maxHead(), errHeadTooLarge, "request trailer")
	if err != nil {
		return fmt.Errorf("request trailer: %w", err)
	}
	tr, err := httphead.ParseTrailer(block, errMalformed)
	if err != nil {
		return err
	}
	for k := range tr {
		if prohibitedTrailer(k) {
			// A proxy that passed them on could make the next hop read
			// the message differently (RFC 9110 §6.5.1).
			delete(tr, k)
		}
	}
	if len(tr) > 0 {
		b.r.Trailer = tr
	}
	return nil
}

// prohibitedTrailer: fields that frame, route, authenticate or control the
// message, which a trailer must not carry.
func prohibitedTrailer(k string) bool {
	switch k {
	case "Transfer-Encoding", "Content-Length", "Content-Encoding", "Content-Type", "Content-Range", "Trailer",
		"Host", "Connection", "Keep-Alive", "Te", "Upgrade", "Expect", "Authorization", "Proxy-Authorization",
		"Cookie", "Set-Cookie", "Cache-Control", "Max-Forwards", "Range":
		return true
	}
	return false
}

// Close is a no-op for the handler: the server reads past what is left
// (drain) or closes the connection when the request ends.
func (b *body) Close() error { return nil }

// drain ends the body when its request ends: what is left is read, up to
// maxDrain. It reports whether the connection can read the next request.
// A body whose 100-continue was never sent is not read at all: the
// client, still waiting, has not sent it.
func (b *body) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.eof {
		return true
	}
	if b.err != nil || b.expect100 {
		return false
	}
	if b.n >= 0 {
		if b.n > maxDrain {
			return false
		}
		m, err := b.c.br.Discard(int(b.n))
		b.n -= int64(m)
		return err == nil
	}
	n, err := io.CopyN(io.Discard, b.cr, maxDrain+1)
	if n > maxDrain || !errors.Is(err, io.EOF) {
		return false
	}
	if err := b.readTrailer(); err != nil {
		return false
	}
	b.eof = true
	return true
}

// undrainable reports whether what is left of the body will not be read
// past when its request ends (see drain), so that the response can say
// that the connection closes. A body being read right now (its lock
// held) is taken to be read to its end: waiting for the reader could
// block the response it waits for.
func (b *body) undrainable() bool {
	if !b.mu.TryLock() {
		return false
	}
	defer b.mu.Unlock()
	return !b.eof && (b.err != nil || b.expect100 || b.n > maxDrain)
}

// shut ends the body when its request ends and the connection closes
// after the response. It reports whether the body was read to its end.
func (b *body) shut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.eof
}
