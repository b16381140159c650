package h2

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// responseWriter is the http.ResponseWriter a handler gets: a handle on
// its stream, cut off (st nil) when the handler returns.
type responseWriter struct {
	st *stream
}

var (
	_ http.ResponseWriter = (*responseWriter)(nil)
	_ http.Flusher        = (*responseWriter)(nil)
)

// bufSize is how much response body is gathered before it is framed: a
// small response leaves as HEADERS and one DATA frame with END_STREAM.
const bufSize = 16 << 10

func (w *responseWriter) Header() http.Header { return w.st.resHdr }

func (w *responseWriter) WriteHeader(code int) { w.st.writeHeader(code) }

func (w *responseWriter) Write(p []byte) (int, error) { return w.st.write(p, "") }

func (w *responseWriter) WriteString(s string) (int, error) { return w.st.write(nil, s) }

// Flush sends the response headers and the body written so far.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting a reset stream or a broken connection
// (http.ResponseController uses it).
func (w *responseWriter) FlushError() error { return w.st.flush() }

// SetReadDeadline bounds the handler's waits for request body data.
func (w *responseWriter) SetReadDeadline(t time.Time) error { return w.st.setDeadline(t, true) }

// SetWriteDeadline resets the stream when the response is not done by t.
func (w *responseWriter) SetWriteDeadline(t time.Time) error { return w.st.setDeadline(t, false) }

// SetResponseFields adds header fields to w's response (w must be this
// server's ResponseWriter, else it reports false): those of block (an
// HTTP/1.x head) that fields locate, with canonical names as
// httphead.ScanFields leaves them, sent after the Header's. They must be
// end-to-end and must not repeat a name of the Header; names HTTP/2 does
// not carry (connection-specific ones) and values it cannot are left out,
// as from the Header. A Content-Length among them frames the response as
// one in the Header would. Call it before WriteHeader. The head is
// copied, once, into a string whose parts the fields become (the HPACK
// encoder's table may keep them): the caller may reuse block and fields
// when the call returns. A proxy passes an upstream response's fields
// this way without building a header map for them.
func SetResponseFields(w http.ResponseWriter, block []byte, fields []httphead.Field) bool {
	rw, ok := w.(*responseWriter)
	if !ok || rw.st == nil || rw.st.wroteHeader {
		return false
	}
	st := rw.st
	st.respBlock = string(block)
	st.respFields = append(st.respFields[:0], fields...)
	return true
}

// fieldsHave reports whether the response's fields (SetResponseFields)
// include the canonical name.
func (st *stream) fieldsHave(name string) bool {
	for _, f := range st.respFields {
		if st.respBlock[f.K0:f.K1] == name {
			return true
		}
	}
	return false
}

// fieldsLength applies a Content-Length among the response's fields, as
// writeHeader does the Header's: one that does not parse, or several
// that disagree, are left out.
func (st *stream) fieldsLength() {
	n, bad := int64(-1), false
	for _, f := range st.respFields {
		if st.respBlock[f.K0:f.K1] != "Content-Length" {
			continue
		}
		v := st.respBlock[f.V0:f.V1]
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil || m < 0 || v[0] == '+' || n >= 0 && m != n {
			bad = true
			break
		}
		n = m
	}
	if !bad {
		if n >= 0 {
			st.resCL = n
		}
		return
	}
	kept := st.respFields[:0]
	for _, f := range st.respFields {
		if st.respBlock[f.K0:f.K1] != "Content-Length" {
			kept = append(kept, f)
		}
	}
	st.respFields = kept
	st.c.srv.logger().Debug("h2: invalid Content-Length field dropped", "uri", st.req.RequestURI)
}

func (st *stream) writeHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if st.wroteHeader {
		st.c.srv.logger().Debug("h2: superfluous WriteHeader call", "code", code, "uri", st.req.RequestURI)
		return
	}
	if code < 200 {
		if code == http.StatusSwitchingProtocols {
			// HTTP/2 has no 101 (RFC 9113 §8.6).
			st.c.srv.logger().Debug("h2: WriteHeader(101) ignored on HTTP/2", "uri", st.req.RequestURI)
			return
		}
		// An informational response goes out at once, with the
		// headers set so far (103 Early Hints' Link).
		c := st.c
		c.mu.Lock()
		if st.resetErr == nil && !c.closed {
			if err := st.writeFieldsLocked(code, st.resHdr, nil, false); err == nil {
				c.out.kick()
			}
		}
		c.mu.Unlock()
		return
	}
	st.wroteHeader = true
	st.status = code
	if len(st.respFields) > 0 {
		st.fieldsLength()
	}
	if len(st.resHdr) == 0 {
		return // the raw path's response: its fields are in respFields
	}
	if vv := st.resHdr["Content-Length"]; len(vv) > 0 {
		n, err := strconv.ParseInt(vv[0], 10, 64)
		if err != nil || n < 0 {
			st.c.srv.logger().Debug("h2: invalid Content-Length dropped", "value", vv[0], "uri", st.req.RequestURI)
			delete(st.resHdr, "Content-Length")
		} else {
			st.resCL = n
		}
	}
	for _, v := range st.resHdr["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if k != "" && validTrailer(k) {
				st.trailerKeys = append(st.trailerKeys, k)
			}
		}
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (st *stream) write(p []byte, s string) (int, error) {
	if !st.wroteHeader {
		st.writeHeader(http.StatusOK)
	}
	n := len(p) + len(s)
	if n == 0 {
		return 0, nil
	}
	if !bodyAllowed(st.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if st.resCL >= 0 && st.written+int64(n) > st.resCL {
		return 0, http.ErrContentLength
	}
	st.written += int64(n)
	if st.head {
		return n, nil
	}
	if len(st.wbuf)+n <= bufSize {
		st.wbuf = append(st.wbuf, p...)
		st.wbuf = append(st.wbuf, s...)
		return n, nil
	}
	if p == nil {
		p = []byte(s)
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	first := st.wbuf
	if len(first) == 0 {
		first = p
	}
	err := st.sendHeaderLocked(first, false, false)
	if err == nil && len(st.wbuf) > 0 {
		err = st.writeDataLocked(st.wbuf, false)
		st.wbuf = st.wbuf[:0]
	}
	if err == nil {
		err = st.writeDataLocked(p, false)
	}
	c.out.kick()
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (st *stream) flush() error {
	if !st.wroteHeader {
		st.writeHeader(http.StatusOK)
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	err := st.sendHeaderLocked(st.wbuf, false, false)
	if err == nil && len(st.wbuf) > 0 {
		err = st.writeDataLocked(st.wbuf, false)
		st.wbuf = st.wbuf[:0]
	}
	c.out.kick()
	return err
}

// finish ends the response after the handler returned.
func (st *stream) finish() {
	if !st.wroteHeader {
		st.writeHeader(http.StatusOK)
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.out.kick()
	if st.localDone {
		return
	}
	trailers := st.hasTrailers()
	short := st.resCL >= 0 && st.written < st.resCL && !st.head && bodyAllowed(st.status)
	if !st.sentHeader {
		end := len(st.wbuf) == 0 && !trailers && !short
		if err := st.sendHeaderLocked(st.wbuf, end, true); err != nil || end {
			return
		}
	}
	if short {
		// Less body than the declared Content-Length: the client must
		// not take it for the whole response.
		if len(st.wbuf) > 0 && st.writeDataLocked(st.wbuf, false) != nil {
			return
		}
		_ = c.writeRSTLocked(st.id, http2.ErrCodeInternal)
		c.resetLocked(st, streamErr(http2.ErrCodeInternal))
		return
	}
	if len(st.wbuf) > 0 || !trailers {
		if err := st.writeDataLocked(st.wbuf, !trailers); err != nil {
			return
		}
	}
	st.wbuf = st.wbuf[:0]
	if trailers {
		_ = st.writeTrailersLocked()
	}
}

// hasTrailers reports whether a declared trailer got a value or a
// TrailerPrefix key is set.
func (st *stream) hasTrailers() bool {
	if len(st.resHdr) == 0 {
		return false
	}
	for _, k := range st.trailerKeys {
		if len(st.resHdr[k]) > 0 {
			return true
		}
	}
	for k := range st.resHdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

func (st *stream) isTrailer(k string) bool {
	for _, t := range st.trailerKeys {
		if t == k {
			return true
		}
	}
	return false
}

// sendHeaderLocked sends the final response's HEADERS unless sent; first
// is the start of the body, for sniffing the Content-Type. finishing says
// the handler returned, so a body that fits the buffer gets its
// Content-Length.
func (st *stream) sendHeaderLocked(first []byte, end, finishing bool) error {
	if st.sentHeader {
		return nil
	}
	if st.resetErr != nil {
		return st.resetErr
	}
	h := st.resHdr
	var extra [3]hpack.HeaderField
	ex := extra[:0]
	if bodyAllowed(st.status) {
		if _, ok := h["Content-Type"]; !ok && len(first) > 0 && !st.head && !st.fieldsHave("Content-Type") {
			ex = append(ex, hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(first[:min(len(first), 512)])})
		}
		if _, ok := h["Content-Length"]; !ok && finishing && (st.written > 0 || !st.head) && !st.fieldsHave("Content-Length") {
			ex = append(ex, hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(st.written, 10)})
		}
	}
	if _, ok := h["Date"]; !ok && !st.fieldsHave("Date") {
		ex = append(ex, hpack.HeaderField{Name: "date", Value: httpDate()})
	}
	st.sentHeader = true
	return st.writeFieldsLocked(st.status, h, ex, end)
}

// writeFieldsLocked encodes a response header block (status, the map
// minus connection-specific fields and trailers, for a final response
// the fields of SetResponseFields, extra) and writes it.
func (st *stream) writeFieldsLocked(status int, h http.Header, extra []hpack.HeaderField, end bool) error {
	c := st.c
	if c.closed {
		return errConnClosed
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	for k, vv := range h {
		name, ok := responseFieldName(k)
		if !ok || st.isTrailer(k) {
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	if status >= 200 {
		for _, f := range st.respFields {
			name, ok := responseFieldName(st.respBlock[f.K0:f.K1])
			v := st.respBlock[f.V0:f.V1]
			if ok && httpguts.ValidHeaderFieldValue(v) {
				_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
			}
		}
	}
	for _, f := range extra {
		_ = c.henc.WriteField(f)
	}
	return st.writeBlockLocked(c.hbuf.Bytes(), end)
}

func (st *stream) writeTrailersLocked() error {
	c := st.c
	if st.resetErr != nil {
		return st.resetErr
	}
	c.hbuf.Reset()
	for _, k := range st.trailerKeys {
		for _, v := range st.resHdr[k] {
			if httpguts.ValidHeaderFieldValue(v) {
				_ = c.henc.WriteField(hpack.HeaderField{Name: lowerName(k), Value: v})
			}
		}
	}
	for k, vv := range st.resHdr {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok || !validTrailer(http.CanonicalHeaderKey(name)) {
			continue
		}
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				_ = c.henc.WriteField(hpack.HeaderField{Name: strings.ToLower(name), Value: v})
			}
		}
	}
	return st.writeBlockLocked(c.hbuf.Bytes(), true)
}

// writeBlockLocked writes a header block as HEADERS and CONTINUATION
// frames no larger than the client allows.
func (st *stream) writeBlockLocked(block []byte, end bool) error {
	c := st.c
	max := int(c.peerMaxFrm)
	first := true
	for first || len(block) > 0 {
		chunk := block[:min(len(block), max)]
		block = block[len(chunk):]
		var err error
		if first {
			err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: chunk, EndStream: end, EndHeaders: len(block) == 0})
		} else {
			err = c.fr.WriteContinuation(st.id, len(block) == 0, chunk)
		}
		if err != nil {
			return err
		}
		first = false
	}
	if end {
		st.endLocalLocked()
	}
	return nil
}

// writeDataLocked writes p as DATA frames, waiting for flow-control
// window and for the pending bytes to drain; end sets END_STREAM on the
// last.
func (st *stream) writeDataLocked(p []byte, end bool) error {
	c := st.c
	for {
		switch {
		case st.resetErr != nil:
			return st.resetErr
		case c.closed || c.out.err != nil:
			return errConnClosed
		case st.localDone:
			return errStreamDone
		}
		if len(p) == 0 {
			if !end {
				return nil
			}
			if err := c.fr.WriteData(st.id, true, nil); err != nil {
				return err
			}
			st.endLocalLocked()
			return nil
		}
		n := min(int64(len(p)), int64(c.peerMaxFrm), st.sendWindow, c.sendWindow)
		if n <= 0 || c.out.full() {
			c.out.kick()
			c.cond.Wait()
			continue
		}
		last := end && int(n) == len(p)
		if err := c.fr.WriteData(st.id, last, p[:n]); err != nil {
			return err
		}
		st.sendWindow -= n
		c.sendWindow -= n
		p = p[n:]
		if last {
			st.endLocalLocked()
			return nil
		}
		if len(p) == 0 {
			return nil
		}
	}
}

var errStreamDone = fmt.Errorf("h2: response already complete")

// endLocalLocked records our END_STREAM.
func (st *stream) endLocalLocked() {
	st.localDone = true
	if st.remoteDone {
		st.c.closeStreamLocked(st)
	}
}

// statusText returns the :status value without allocating for common
// codes.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 206:
		return "206"
	case 304:
		return "304"
	case 400:
		return "400"
	case 404:
		return "404"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	return strconv.Itoa(code)
}

// dateCache holds the Date value of the current second: formatting it per
// response would cost an allocation each.
var dateCache atomic.Pointer[dateEntry]

type dateEntry struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateEntry{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}
