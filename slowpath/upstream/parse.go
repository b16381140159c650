package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

var errHeadTooLarge = errors.New("response head larger than the limit")

// head is a parsed response head (status line and header fields).
type head struct {
	code   int
	minor  int    // HTTP/1.minor
	status string // "200 OK"
	// header holds the fields, unless the head was parsed into a
	// Scratch's fields (raw).
	header http.Header
	raw    bool
	block  []byte
	fields []httphead.Field
	// chunked: a raw head's body is chunked (Transfer-Encoding: chunked,
	// and no Content-Length).
	chunked bool
}

// readBlock reads a head up to and including the empty line that ends it.
// The result is valid until the next read from c.br.
func (c *conn) readBlock(limit int) ([]byte, error) {
	return httphead.ReadBlock(c.br, limit, errHeadTooLarge, "response head")
}

// parseHead parses a status line and header fields, into hdr (cleared
// first; nil: a new map).
func parseHead(block []byte, hdr http.Header) (head, error) {
	var stack [32]httphead.Field
	h, fields, err := scanHead(block, stack[:0])
	if err != nil {
		return h, err
	}
	s := string(block) // the one copy: status, keys and values are its substrings
	line := httphead.TrimCR(block[:bytes.IndexByte(block, '\n')])
	h.status = s[statusStart(line):len(line)]
	// Values get an array of their own: the client's header map refers
	// to them after the exchange, which a reused array would overwrite.
	h.header, _ = httphead.BuildHeader(hdr, nil, s, block, fields, commonKeys)
	return h, nil
}

// parseFields parses a head into s's fields when its framing can be read
// from them alone (see Scratch.WantFields); otherwise as parseHead does,
// into s's header map.
func parseFields(block []byte, s *Scratch) (head, error) {
	s.hasFields = false
	h, fields, err := scanHead(block, s.fields[:0])
	if err != nil {
		return h, err
	}
	s.fields = fields
	plain, chunked := plainFields(block, fields)
	if h.code < 200 || h.code == http.StatusSwitchingProtocols || !plain || chunked && h.minor == 0 {
		return parseHead(block, s.header)
	}
	h.chunked = chunked
	s.block = append(s.block[:0], block...)
	s.hasFields = true
	if s.header == nil {
		s.header = make(http.Header)
	}
	clear(s.header)
	line := httphead.TrimCR(block[:bytes.IndexByte(block, '\n')])
	h.status = statusText(h.code, line[statusStart(line)+3:])
	h.header = s.header
	h.raw, h.block, h.fields = true, s.block, fields
	return h, nil
}

// plainFields reports whether a response's framing and fields are what
// the fields path handles (plain): no Trailer, no folded line, and either
// no Transfer-Encoding or one "chunked" without a Content-Length (chunked).
func plainFields(block []byte, fields []httphead.Field) (plain, chunked bool) {
	te, length := 0, false
	for _, f := range fields {
		switch {
		case f.K0 < 0 || f.Is(block, "Trailer"):
			return false, false
		case f.Is(block, "Transfer-Encoding"):
			te++
			chunked = bytes.EqualFold(f.Value(block), []byte("chunked"))
		case f.Is(block, "Content-Length"):
			length = true
		}
	}
	if te == 0 {
		return true, false
	}
	return te == 1 && chunked && !length, chunked
}

// scanHead checks a head's status line and scans its fields.
func scanHead(block []byte, fields []httphead.Field) (head, []httphead.Field, error) {
	var h head
	e := bytes.IndexByte(block, '\n')
	line := httphead.TrimCR(block[:e])
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[7] < '0' || line[7] > '9' || line[8] != ' ' {
		return h, nil, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
	}
	h.minor = int(line[7] - '0')
	i := statusStart(line)
	if i+3 > len(line) || (i+3 < len(line) && line[i+3] != ' ') {
		return h, nil, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
	}
	for _, d := range line[i : i+3] {
		if d < '0' || d > '9' {
			return h, nil, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
		}
		h.code = h.code*10 + int(d-'0')
	}
	if h.code < 100 {
		return h, nil, fmt.Errorf("status code %d: %w", h.code, ErrMalformedResponse)
	}
	for _, b := range line[i+3:] {
		if b < ' ' && b != '\t' || b == 0x7f {
			return h, nil, fmt.Errorf("control character in the status line: %w", ErrMalformedResponse)
		}
	}
	fields, err := httphead.ScanFields(block, e+1, fields, ErrMalformedResponse, false)
	return h, fields, err
}

// statusStart is the offset of the status code in a status line: after
// "HTTP/1.x " and any more spaces, which net/http tolerates too.
func statusStart(line []byte) int {
	i := 9
	for i < len(line) && line[i] == ' ' {
		i++
	}
	return i
}

// statusLines are "<code> <reason>" for the codes net/http names.
var statusLines = func() map[int]string {
	m := make(map[int]string)
	for code := 100; code < 600; code++ {
		if t := http.StatusText(code); t != "" {
			m[code] = strconv.Itoa(code) + " " + t
		}
	}
	return m
}()

// statusText is Response.Status: without an allocation when the reason is
// the usual one.
func statusText(code int, reason []byte) string {
	reason = bytes.TrimLeft(reason, " ")
	if line, ok := statusLines[code]; ok && string(reason) == line[4:] {
		return line
	}
	if len(reason) == 0 {
		return strconv.Itoa(code)
	}
	return strconv.Itoa(code) + " " + string(reason)
}

// parseTrailer parses the trailer section of a chunked body.
func parseTrailer(block []byte) (http.Header, error) {
	return httphead.ParseTrailer(block, ErrMalformedResponse)
}

// parseContentLength parses the Content-Length values of a head; -1 if
// there is none.
func parseContentLength(vs []string) (int64, error) {
	return httphead.ParseContentLength(vs, ErrMalformedResponse)
}

// commonKeys are header names that responses often carry, so that their
// keys need no string of their own.
var commonKeys = httphead.Keys(
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
)
