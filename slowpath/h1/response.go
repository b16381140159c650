package h1

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// holdBack is how much of a response body without a declared length is
// held back, so that a small response goes out with a Content-Length in
// one write rather than chunked.
const holdBack = 4096

var (
	errFinished = errors.New("http: response used after its handler returned")
)

// response is the http.ResponseWriter of a connection's current request.
type response struct {
	c   *conn
	r   *http.Request
	hdr http.Header

	status      int
	wroteHeader bool // a final status is set
	headSent    bool // the head is in the write buffer
	chunked     bool
	noBody      bool  // HEAD, 204, 304
	clen        int64 // declared Content-Length; -1: none
	written     int64
	closeAfter  bool
	finished    bool
	trailers    []string // declared trailer names
	buf         []byte   // body held back (holdBack)
	scratch     [64]byte
	// fields are header fields of block that the response carries after
	// hdr's (SetResponseFields): copies, kept with the connection.
	block  []byte
	fields []httphead.Field
}

func (w *response) reset(r *http.Request) {
	if len(w.hdr) > 0 {
		clear(w.hdr)
	}
	block, fields := w.block[:0], w.fields[:0]
	if cap(block) > maxKeptBlock {
		// One huge upstream head does not pin its copy for the
		// connection's life.
		block, fields = nil, nil
	}
	*w = response{c: w.c, r: r, hdr: w.hdr, clen: -1, buf: w.buf[:0], trailers: w.trailers[:0],
		block: block, fields: fields}
}

// maxKeptBlock bounds the copy of SetResponseFields' head kept between
// requests.
const maxKeptBlock = 8 << 10

// SetResponseFields adds header fields to w's response (w must be this
// server's ResponseWriter, else it reports false): those of block that
// fields locate, written as they are after the Header's. They must be
// valid (httphead.ScanFields checked them) and end-to-end, and must not
// repeat a name of the Header or be Connection, Transfer-Encoding or
// Trailer; a Content-Length among them frames the response as one in the
// Header would. Call it before WriteHeader. block and fields are copied:
// the caller may reuse them when the call returns, as a proxy reuses an
// upstream response's head once its handler returns, which can be before
// the head is written (a small body is held back until then). A proxy
// passes an upstream response's fields this way without building a
// header map for them.
func SetResponseFields(w http.ResponseWriter, block []byte, fields []httphead.Field) bool {
	rw, ok := w.(*response)
	if !ok || rw.wroteHeader || rw.finished {
		return false
	}
	rw.block = append(rw.block[:0], block...)
	rw.fields = append(rw.fields[:0], fields...)
	return true
}

// fieldsHave reports whether the response's fields include name.
func (w *response) fieldsHave(name string) bool {
	for _, f := range w.fields {
		if f.Is(w.block, name) {
			return true
		}
	}
	return false
}

// Header returns the response header.
func (w *response) Header() http.Header { return w.hdr }

// WriteHeader sends an informational response (1xx but 101) at once, or
// sets the final status.
func (w *response) WriteHeader(code int) {
	if w.finished || w.c.hijacked || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	if len(w.fields) > 0 {
		if n, err := httphead.ContentLength(w.block, w.fields, errMalformed); err == nil {
			w.clen = n
		} else {
			w.dropLength()
		}
	}
	if cl := w.hdr["Content-Length"]; len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 || len(cl) > 1 && !allSame(cl) {
			delete(w.hdr, "Content-Length")
		} else {
			w.clen = n
		}
	}
	w.noBody = w.r.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
}

// dropLength leaves out of the response's fields a Content-Length that
// does not parse, as WriteHeader does with the Header's.
func (w *response) dropLength() {
	kept := w.fields[:0] // the response's own copy, filtered in place
	for _, f := range w.fields {
		if !f.Is(w.block, "Content-Length") {
			kept = append(kept, f)
		}
	}
	w.fields = kept
}

func allSame(vs []string) bool {
	for _, v := range vs[1:] {
		if v != vs[0] {
			return false
		}
	}
	return true
}

// writeInformational writes a 1xx head with the current header fields
// (103 Early Hints carries some); HTTP/1.0 clients get none.
func (w *response) writeInformational(code int) {
	if w.r.ProtoMinor == 0 {
		return
	}
	bw := w.c.bw
	b := append(w.scratch[:0], "HTTP/1.1 "...)
	b = appendStatus(b, code)
	_, _ = bw.Write(b)
	writeFields(bw, w.hdr)
	_, _ = bw.WriteString("\r\n")
	_ = bw.Flush()
}

// writeContinue answers Expect: 100-continue when the handler first reads
// the body.
func (c *conn) writeContinue() error {
	if _, err := c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
		return err
	}
	return c.bw.Flush()
}

// Write writes body bytes: held back while small and of unknown length,
// else after the head (chunked when the length is unknown).
func (w *response) Write(p []byte) (int, error) {
	if w.finished {
		return 0, errFinished
	}
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		if w.r.Method == http.MethodHead {
			w.written += int64(len(p))
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.headSent {
		if w.clen < 0 && len(w.buf)+len(p) <= holdBack {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.sendHead(false)
	}
	return w.writeBody(p)
}

// WriteString is Write without a conversion.
func (w *response) WriteString(s string) (int, error) {
	if !w.headSent && !w.finished && !w.c.hijacked && w.wroteHeader && !w.noBody && w.clen < 0 && len(w.buf)+len(s) <= holdBack {
		w.buf = append(w.buf, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

func (w *response) writeBody(p []byte) (int, error) {
	bw := w.c.bw
	if !w.chunked {
		return bw.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	b := strconv.AppendInt(w.scratch[:0], int64(len(p)), 16)
	b = append(b, '\r', '\n')
	if _, err := bw.Write(b); err != nil {
		return 0, err
	}
	n, err := bw.Write(p)
	if err != nil {
		return n, err
	}
	_, err = bw.WriteString("\r\n")
	return n, err
}

// sendHead writes the head into the write buffer, then what was held
// back. At the handler's end (final) a held-back body's length is known.
func (w *response) sendHead(final bool) {
	w.headSent = true
	r, c, h := w.r, w.c, w.hdr
	if httpguts.HeaderValuesContainsToken(h["Connection"], "close") || c.s.draining.Load() || r.Close {
		w.closeAfter = true
	} else if c.body != nil && c.body.undrainable() {
		// The request's body will not be read: the connection ends after
		// this response, and the client should know it now.
		w.closeAfter = true
	}
	if tr := h["Trailer"]; len(tr) > 0 && !w.noBody {
		for _, v := range tr {
			for f := range strings.SplitSeq(v, ",") {
				if f = strings.TrimSpace(f); f != "" {
					w.trailers = append(w.trailers, http.CanonicalHeaderKey(f))
				}
			}
		}
	}
	switch {
	case w.noBody:
		if w.r.Method == http.MethodHead && w.clen < 0 && final && w.written > 0 {
			w.clen = w.written
			h["Content-Length"] = []string{strconv.FormatInt(w.written, 10)}
		}
	case w.clen >= 0:
	case final && (len(w.trailers) == 0 && !hasTrailerPrefix(h) || r.ProtoMinor == 0):
		// Trailers (declared, or set with http.TrailerPrefix) need chunked
		// framing, which HTTP/1.0 lacks.
		w.clen = int64(len(w.buf))
	case r.ProtoMinor == 1:
		w.chunked = true
	default:
		// HTTP/1.0 and no length: the body ends with the connection.
		w.closeAfter = true
	}

	bw := c.bw
	b := w.scratch[:0]
	if r.ProtoMinor == 0 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = appendStatus(b, w.status)
	_, _ = bw.Write(b)
	delete(h, "Connection")
	delete(h, "Transfer-Encoding")
	if _, ok := h["Date"]; !ok && !w.fieldsHave("Date") {
		b = appendDate(w.scratch[:0], time.Now())
		_, _ = bw.Write(b)
	}
	if _, declared := h["Content-Length"]; !declared && !w.fieldsHave("Content-Length") && w.clen >= 0 && !w.noBody && w.status >= 200 {
		b = append(w.scratch[:0], "Content-Length: "...)
		b = strconv.AppendInt(b, w.clen, 10)
		b = append(b, '\r', '\n')
		_, _ = bw.Write(b)
	}
	writeFields(bw, h)
	for _, f := range w.fields {
		_, _ = bw.Write(f.Name(w.block))
		_, _ = bw.WriteString(": ")
		_, _ = bw.Write(f.Value(w.block))
		_, _ = bw.WriteString("\r\n")
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	switch {
	case w.closeAfter:
		_, _ = bw.WriteString("Connection: close\r\n")
	case r.ProtoMinor == 0:
		_, _ = bw.WriteString("Connection: keep-alive\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if len(w.buf) > 0 && !w.noBody {
		held := w.buf
		w.buf = w.buf[:0]
		_, _ = w.writeBody(held)
	}
}

// hasTrailerPrefix reports whether h holds trailers set with
// http.TrailerPrefix.
func hasTrailerPrefix(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// writeFields writes header fields, folding CR and LF in values to
// spaces, as net/http does, so that no value can start a field of its
// own.
func writeFields(bw *bufio.Writer, h http.Header) {
	for k, vs := range h {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			writeField(bw, k, vs)
		}
	}
}

// writeField writes the lines of one field; a name that is no token is
// left out (net/http does the same), so no handler can break the framing.
func writeField(bw *bufio.Writer, k string, vs []string) {
	if !httpguts.ValidHeaderFieldName(k) {
		return
	}
	for _, v := range vs {
		_, _ = bw.WriteString(k)
		_, _ = bw.WriteString(": ")
		if strings.ContainsAny(v, "\r\n") {
			v = newlineToSpace.Replace(v)
		}
		_, _ = bw.WriteString(v)
		_, _ = bw.WriteString("\r\n")
	}
}

var newlineToSpace = strings.NewReplacer("\r", " ", "\n", " ")

// finish completes the response when the handler returns: the head if
// not sent, the held-back body, the last chunk and trailers, one flush.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(true)
	}
	w.finished = true
	bw := w.c.bw
	if w.chunked {
		_, _ = bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			writeField(bw, k, w.hdr[k])
		}
		for k, vs := range w.hdr {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				writeField(bw, http.CanonicalHeaderKey(name), vs)
			}
		}
		_, _ = bw.WriteString("\r\n")
	}
	// The response is complete: its last bytes may wait for the burst.
	if bw.Buffered() > 0 {
		w.c.out.Defer()
		w.c.rawOut.Defer() // the TLS record it becomes
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if w.clen >= 0 && w.written < w.clen && !w.noBody {
		// The handler wrote less than it declared: the client cannot find
		// the next response.
		return http.ErrContentLength
	}
	return nil
}

// Flush sends the head and whatever body is buffered.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting a write error (http.ResponseController).
func (w *response) FlushError() error {
	if w.finished {
		return errFinished
	}
	if w.c.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false)
	}
	return w.c.bw.Flush()
}

// Hijack hands the connection over (WebSocket, h2c upgrade): the server
// no longer reads, writes or closes it.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if w.finished || c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.headSent {
		return nil, nil, errors.New("http: hijack after the response head was sent")
	}
	c.hijacked = true
	c.state.Store(stateActive)
	c.s.remove(c)
	_ = c.nc.SetDeadline(time.Time{})
	if b := c.body; b != nil && b.mu.TryLock() {
		// The read buffer is the hijacker's now: a body read would read
		// it (or panic on its nil). A reader running now is not waited
		// for; it may block for good.
		b.closed = true
		b.mu.Unlock()
	}
	if err := c.out.Sync(); err != nil {
		return nil, nil, err
	}
	if err := c.rawOut.Sync(); err != nil {
		return nil, nil, err
	}
	// The hijacker sets its own deadlines; the write above may have set one.
	c.out.SetSendTimeout(0)
	_ = c.nc.SetWriteDeadline(time.Time{})
	// The buffers go with the connection and are not pooled again.
	rw := bufio.NewReadWriter(c.br, c.bw)
	c.br, c.bw = nil, nil
	return c.nc, rw, nil
}

// SetReadDeadline sets the connection's read deadline
// (http.ResponseController), from the handler's goroutine.
func (w *response) SetReadDeadline(t time.Time) error { return w.c.setReadDeadline(t) }

// SetWriteDeadline sets the connection's write deadline
// (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// EnableFullDuplex: the request body can always be read while the
// response is written.
func (w *response) EnableFullDuplex() error { return nil }

// appendStatus appends "<code> <reason>\r\n".
func appendStatus(b []byte, code int) []byte {
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	return append(b, '\r', '\n')
}
