// Package httphead reads and parses HTTP/1.x message heads: the start
// line and header fields of a request or response, and the trailer section
// of a chunked body. The slow path's own HTTP/1.1 server (requests) and
// upstream client (responses) share it, so both sides of the proxy judge
// framing by the same rules.
//
// Parsing allocates one string per head: keys and values are substrings
// of it, and the values of a header share one backing array, as
// net/textproto does.
package httphead

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// ReadBlock reads a head up to and including the empty line that ends it,
// at most limit bytes; a longer one fails with tooLarge. The result is
// valid until the next read from br. A head that fits the read buffer
// (nearly all) is returned from it without a copy. what names the head in
// errors ("response head").
func ReadBlock(br *bufio.Reader, limit int, tooLarge error, what string) ([]byte, error) {
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
			if end := HeadEnd(buf, scan); end > 0 {
				if end > limit {
					return nil, fmt.Errorf("%w (%d bytes)", tooLarge, limit)
				}
				_, _ = br.Discard(end)
				return buf[:end], nil
			}
			if n < br.Size() {
				if n > limit {
					return nil, fmt.Errorf("%w (%d bytes)", tooLarge, limit)
				}
				scan = max(0, n-2)
				if _, err := br.Peek(n + 1); err != nil {
					if n > 0 && errors.Is(err, io.EOF) {
						return nil, fmt.Errorf("connection closed within the %s: %w", what, io.ErrUnexpectedEOF)
					}
					return nil, err
				}
				continue
			}
			acc = make([]byte, 0, 2*n)
		}
		prev := len(acc)
		acc = append(acc, buf...)
		if end := HeadEnd(acc, max(0, prev-2)); end > 0 {
			if end > limit {
				return nil, fmt.Errorf("%w (%d bytes)", tooLarge, limit)
			}
			_, _ = br.Discard(end - prev)
			return acc[:end], nil
		}
		_, _ = br.Discard(n)
		if len(acc) > limit {
			return nil, fmt.Errorf("%w (%d bytes)", tooLarge, limit)
		}
	}
}

// HeadEnd returns the length of the head in b (through the empty line
// that ends it, CRLF or bare LF), or -1 if b does not hold all of it yet.
// Scanning starts at from.
func HeadEnd(b []byte, from int) int {
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

// Field locates one header field in a head; K0 < 0 marks a continuation
// line (obs-fold) of the previous field's value.
type Field struct{ K0, K1, V0, V1 int }

// ScanFields checks the header field lines of block from offset i and
// records where keys and values are, appending to fields. It canonicalizes
// keys in place, so that building the header copies them as they are.
// Errors wrap malformed. With noFold, continuation lines are malformed
// (RFC 9112 §5.2 lets a server reject them; a proxy that joined them would
// read a header differently from the next hop).
func ScanFields(block []byte, i int, fields []Field, malformed error, noFold bool) ([]Field, error) {
	for i < len(block) {
		j := bytes.IndexByte(block[i:], '\n')
		if j < 0 {
			break // a last line without its end
		}
		e := i + j
		line := TrimCR(block[i:e])
		if len(line) == 0 {
			return fields, nil
		}
		var f Field
		if line[0] == ' ' || line[0] == '\t' {
			if len(fields) == 0 || noFold {
				return nil, fmt.Errorf("continuation line %q: %w", Clip(line), malformed)
			}
			f.K0 = -1
			f.V0, f.V1 = TrimOWS(block, i, i+len(line))
		} else {
			colon := bytes.IndexByte(line, ':')
			if colon <= 0 {
				return nil, fmt.Errorf("header line %q: %w", Clip(line), malformed)
			}
			key := line[:colon]
			if !Canonicalize(key) {
				return nil, fmt.Errorf("header field name %q: %w", Clip(key), malformed)
			}
			f.K0, f.K1 = i, i+colon
			f.V0, f.V1 = TrimOWS(block, i+colon+1, i+len(line))
		}
		for _, b := range block[f.V0:f.V1] {
			if b < ' ' && b != '\t' || b == 0x7f {
				return nil, fmt.Errorf("control character in header line %q: %w", Clip(line), malformed)
			}
		}
		fields = append(fields, f)
		i = e + 1
	}
	return nil, fmt.Errorf("head without an end: %w", malformed)
}

// BuildHeader fills h (cleared first; nil: a new one) with fields; s is
// block as a string. Values share one backing array: vals when it is large
// enough, else a new one; it is returned for the next call of an owner
// that may reuse it (whose values nobody uses by then). Keys found in
// common need no string of their own.
func BuildHeader(h http.Header, vals []string, s string, block []byte, fields []Field, common map[string]string) (http.Header, []string) {
	n := 0
	for _, f := range fields {
		if f.K0 >= 0 {
			n++
		}
	}
	if h == nil {
		h = make(http.Header, n)
	} else {
		clear(h)
	}
	if cap(vals) < n {
		vals = make([]string, n)
	}
	vals = vals[:n]
	j := 0
	var last string
	for _, f := range fields {
		v := s[f.V0:f.V1]
		if f.K0 < 0 {
			vs := h[last]
			if prev := vs[len(vs)-1]; prev != "" {
				v = prev + " " + v
			}
			vs[len(vs)-1] = v
			continue
		}
		key, ok := common[string(block[f.K0:f.K1])]
		if !ok {
			key = s[f.K0:f.K1]
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
	return h, vals
}

// ParseTrailer parses the trailer section of a chunked body (nil when it
// has no field).
func ParseTrailer(block []byte, malformed error) (http.Header, error) {
	var stack [8]Field
	fields, err := ScanFields(block, 0, stack[:0], malformed, false)
	if err != nil || len(fields) == 0 {
		return nil, err
	}
	h, _ := BuildHeader(nil, nil, string(block), block, fields, nil)
	return h, nil
}

// Canonicalize checks that key is a token and puts it in canonical form
// (Content-Type), in place.
func Canonicalize(key []byte) bool {
	upper := true
	for i, b := range key {
		if !TokenByte[b] {
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

// TrimCR drops a line's final CR.
func TrimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

// TrimOWS returns b[i:j] without optional white space on either side, as
// offsets.
func TrimOWS(b []byte, i, j int) (int, int) {
	for i < j && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t') {
		j--
	}
	return i, j
}

// Clip shortens what an error quotes from a message.
func Clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// ParseContentLength parses the Content-Length values of a head: all must
// be the same non-negative decimal number. It returns -1 if there is none.
// Errors wrap malformed.
func ParseContentLength(vs []string, malformed error) (int64, error) {
	if len(vs) == 0 {
		return -1, nil
	}
	var n int64 = -1
	for _, v := range vs {
		if v == "" || v[0] < '0' || v[0] > '9' {
			return 0, fmt.Errorf("Content-Length %q: %w", v, malformed)
		}
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("Content-Length %q: %w", v, malformed)
		}
		if n >= 0 && m != n {
			return 0, fmt.Errorf("conflicting Content-Length values %q: %w", vs, malformed)
		}
		n = m
	}
	return n, nil
}

// TokenByte tells the bytes allowed in a token, such as a header field name or a
// method (RFC 9110 tchar).
var TokenByte = func() (t [256]bool) {
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

// Keys returns a set of header keys for BuildHeader's common argument.
func Keys(keys ...string) map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = k
	}
	return m
}

// HasHead reports whether br's buffer holds a whole head already.
func HasHead(br *bufio.Reader) bool {
	buf, _ := br.Peek(br.Buffered())
	return HeadEnd(buf, 0) > 0
}
