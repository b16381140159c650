package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

var errHeadTooLarge = errors.New("response head larger than the limit")

// head is a parsed response head (status line and header fields).
type head struct {
	code   int
	minor  int    // HTTP/1.minor
	status string // "200 OK"
	header http.Header
}

// readBlock reads a head up to and including the empty line that ends it.
// The result is valid until the next read from c.br. A head that fits the
// read buffer (nearly all) is returned from it without a copy.
func (c *conn) readBlock(limit int) ([]byte, error) {
	br := c.br
	var acc []byte // the head so far, once it outgrew the buffer
	scan := 0
	for {
		n := br.Buffered()
		if n == 0 {
			if _, err := br.Peek(1); err != nil {
				return nil, err
			}
			n = br.Buffered()
		}
		buf, _ := br.Peek(n)
		if acc == nil {
			if end := headEnd(buf, scan); end > 0 {
				if end > limit {
					return nil, fmt.Errorf("%w (%d bytes)", errHeadTooLarge, limit)
				}
				_, _ = br.Discard(end)
				return buf[:end], nil
			}
			if n < br.Size() {
				scan = max(0, n-2)
				if _, err := br.Peek(n + 1); err != nil {
					if n > 0 && errors.Is(err, io.EOF) {
						return nil, fmt.Errorf("connection closed within the response head: %w", io.ErrUnexpectedEOF)
					}
					return nil, err
				}
				continue
			}
			acc = make([]byte, 0, 2*n)
		}
		prev := len(acc)
		acc = append(acc, buf...)
		if end := headEnd(acc, max(0, prev-2)); end > 0 {
			if end > limit {
				return nil, fmt.Errorf("%w (%d bytes)", errHeadTooLarge, limit)
			}
			_, _ = br.Discard(end - prev)
			return acc[:end], nil
		}
		_, _ = br.Discard(n)
		if len(acc) > limit {
			return nil, fmt.Errorf("%w (%d bytes)", errHeadTooLarge, limit)
		}
	}
}

// headEnd returns the length of the head in b (through the empty line
// that ends it, CRLF or bare LF), or -1 if b does not hold all of it yet.
// Scanning starts at from.
func headEnd(b []byte, from int) int {
	if from == 0 {
		// An empty head: trailers with no field.
		if len(b) >= 1 && b[0] == '\n' {
			return 1
		}
		if len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
			return 2
		}
	}
	for i := from; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
	return -1
}

// field locates one header field in a head; k0 < 0 marks a continuation
// line (obs-fold) of the previous field's value.
type field struct{ k0, k1, v0, v1 int }

// parseHead parses a status line and header fields.
func parseHead(block []byte) (head, error) {
	var h head
	e := bytes.IndexByte(block, '\n')
	line := trimCR(block[:e])
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[7] < '0' || line[7] > '9' || line[8] != ' ' {
		return h, fmt.Errorf("status line %q: %w", clip(line), ErrMalformedResponse)
	}
	h.minor = int(line[7] - '0')
	i := 9
	for i < len(line) && line[i] == ' ' {
		i++ // tolerate extra spaces, as net/http does
	}
	statusStart := i
	if i+3 > len(line) || (i+3 < len(line) && line[i+3] != ' ') {
		return h, fmt.Errorf("status line %q: %w", clip(line), ErrMalformedResponse)
	}
	for _, d := range line[i : i+3] {
		if d < '0' || d > '9' {
			return h, fmt.Errorf("status line %q: %w", clip(line), ErrMalformedResponse)
		}
		h.code = h.code*10 + int(d-'0')
	}
	if h.code < 100 {
		return h, fmt.Errorf("status code %d: %w", h.code, ErrMalformedResponse)
	}
	for _, b := range line[i+3:] {
		if b < ' ' && b != '\t' || b == 0x7f {
			return h, fmt.Errorf("control character in the status line: %w", ErrMalformedResponse)
		}
	}
	var stack [32]field
	fields, err := scanFields(block, e+1, stack[:0])
	if err != nil {
		return h, err
	}
	s := string(block) // the one copy: status, keys and values are its substrings
	h.status = s[statusStart:len(line)]
	h.header = buildHeader(s, block, fields)
	return h, nil
}

// parseTrailer parses the trailer section of a chunked body.
func parseTrailer(block []byte) (http.Header, error) {
	var stack [8]field
	fields, err := scanFields(block, 0, stack[:0])
	if err != nil || len(fields) == 0 {
		return nil, err
	}
	return buildHeader(string(block), block, fields), nil
}

// scanFields checks the header field lines of block from offset i and
// records where keys and values are. It canonicalizes keys in place, so
// that building the header copies them as they are.
func scanFields(block []byte, i int, fields []field) ([]field, error) {
	for i < len(block) {
		e := i + bytes.IndexByte(block[i:], '\n')
		line := trimCR(block[i:e])
		if len(line) == 0 {
			return fields, nil
		}
		var f field
		if line[0] == ' ' || line[0] == '\t' {
			if len(fields) == 0 {
				return nil, fmt.Errorf("continuation line %q before any header field: %w", clip(line), ErrMalformedResponse)
			}
			f.k0 = -1
			f.v0, f.v1 = trimOWS(block, i, i+len(line))
		} else {
			colon := bytes.IndexByte(line, ':')
			if colon <= 0 {
				return nil, fmt.Errorf("header line %q: %w", clip(line), ErrMalformedResponse)
			}
			key := line[:colon]
			if !canonicalize(key) {
				return nil, fmt.Errorf("header field name %q: %w", clip(key), ErrMalformedResponse)
			}
			f.k0, f.k1 = i, i+colon
			f.v0, f.v1 = trimOWS(block, i+colon+1, i+len(line))
		}
		for _, b := range block[f.v0:f.v1] {
			if b < ' ' && b != '\t' || b == 0x7f {
				return nil, fmt.Errorf("control character in header line %q: %w", clip(line), ErrMalformedResponse)
			}
		}
		fields = append(fields, f)
		i = e + 1
	}
	return nil, fmt.Errorf("head without an end: %w", ErrMalformedResponse)
}

// buildHeader makes the header of fields; s is block as a string. Values
// share one backing array, as net/textproto does.
func buildHeader(s string, block []byte, fields []field) http.Header {
	n := 0
	for _, f := range fields {
		if f.k0 >= 0 {
			n++
		}
	}
	h := make(http.Header, n)
	vals := make([]string, n)
	j := 0
	var last string
	for _, f := range fields {
		v := s[f.v0:f.v1]
		if f.k0 < 0 {
			vs := h[last]
			if prev := vs[len(vs)-1]; prev != "" {
				v = prev + " " + v
			}
			vs[len(vs)-1] = v
			continue
		}
		key, ok := commonKeys[string(block[f.k0:f.k1])]
		if !ok {
			key = s[f.k0:f.k1]
		}
		if vs, ok := h[key]; ok {
			h[key] = append(vs, v)
		} else {
			vals[j] = v
			h[key] = vals[j : j+1 : j+1]
			j++
		}
		last = key
	}
	return h
}

// canonicalize checks that key is a token and puts it in canonical form
// (Content-Type), in place.
func canonicalize(key []byte) bool {
	upper := true
	for i, b := range key {
		if !tokenByte[b] {
			return false
		}
		switch {
		case upper && 'a' <= b && b <= 'z':
			key[i] = b - ('a' - 'A')
		case !upper && 'A' <= b && b <= 'Z':
			key[i] = b + ('a' - 'A')
		}
		upper = b == '-'
	}
	return true
}

func trimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

func trimOWS(b []byte, i, j int) (int, int) {
	for i < j && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t') {
		j--
	}
	return i, j
}

// clip shortens what an error quotes from a response.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// parseContentLength parses the Content-Length values of a head: all must
// be the same non-negative decimal number. It returns -1 if there is none.
func parseContentLength(vs []string) (int64, error) {
	if len(vs) == 0 {
		return -1, nil
	}
	var n int64 = -1
	for _, v := range vs {
		if v == "" || v[0] < '0' || v[0] > '9' {
			return 0, fmt.Errorf("Content-Length %q: %w", v, ErrMalformedResponse)
		}
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("Content-Length %q: %w", v, ErrMalformedResponse)
		}
		if n >= 0 && m != n {
			return 0, fmt.Errorf("conflicting Content-Length values %q: %w", vs, ErrMalformedResponse)
		}
		n = m
	}
	return n, nil
}

// tokenByte: bytes allowed in a header field name (RFC 9110 tchar).
var tokenByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// commonKeys are header names that responses often carry, so that their
// keys need no string of their own.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept-Ranges", "Access-Control-Allow-Credentials", "Access-Control-Allow-Headers",
		"Access-Control-Allow-Methods", "Access-Control-Allow-Origin", "Access-Control-Expose-Headers",
		"Access-Control-Max-Age", "Age", "Alt-Svc", "Cache-Control", "Connection", "Content-Disposition",
		"Content-Encoding", "Content-Language", "Content-Length", "Content-Location", "Content-Range",
		"Content-Security-Policy", "Content-Type", "Date", "Etag", "Expires", "Grpc-Message", "Grpc-Status",
		"Keep-Alive", "Last-Modified", "Link", "Location", "Pragma", "Proxy-Authenticate", "Referrer-Policy",
		"Retry-After", "Sec-Websocket-Accept", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol", "Server",
		"Set-Cookie", "Strict-Transport-Security", "Trailer", "Transfer-Encoding", "Upgrade", "Vary", "Via",
		"Www-Authenticate", "X-Content-Type-Options", "X-Frame-Options", "X-Powered-By", "X-Request-Id",
		"X-Xss-Protection",
	} {
		m[k] = k
	}
	return m
}()
