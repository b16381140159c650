package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
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
// The result is valid until the next read from c.br.
func (c *conn) readBlock(limit int) ([]byte, error) {
	return httphead.ReadBlock(c.br, limit, errHeadTooLarge, "response head")
}

// parseHead parses a status line and header fields, into hdr (cleared
// first; nil: a new map).
func parseHead(block []byte, hdr http.Header) (head, error) {
	var h head
	e := bytes.IndexByte(block, '\n')
	line := httphead.TrimCR(block[:e])
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[7] < '0' || line[7] > '9' || line[8] != ' ' {
		return h, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
	}
	h.minor = int(line[7] - '0')
	i := 9
	for i < len(line) && line[i] == ' ' {
		i++ // tolerate extra spaces, as net/http does
	}
	statusStart := i
	if i+3 > len(line) || (i+3 < len(line) && line[i+3] != ' ') {
		return h, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
	}
	for _, d := range line[i : i+3] {
		if d < '0' || d > '9' {
			return h, fmt.Errorf("status line %q: %w", httphead.Clip(line), ErrMalformedResponse)
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
	var stack [32]httphead.Field
	fields, err := httphead.ScanFields(block, e+1, stack[:0], ErrMalformedResponse, false)
	if err != nil {
		return h, err
	}
	s := string(block) // the one copy: status, keys and values are its substrings
	h.status = s[statusStart:len(line)]
	// Values get an array of their own: the client's header map refers
	// to them after the exchange, which a reused array would overwrite.
	h.header, _ = httphead.BuildHeader(hdr, nil, s, block, fields, commonKeys)
	return h, nil
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
