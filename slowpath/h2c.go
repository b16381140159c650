package slowpath

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/h2"
)

// h2cUpgrade reports whether r asks to switch a cleartext HTTP/1.1
// connection to HTTP/2 (RFC 7540 §3.2: "Upgrade: h2c" with an
// HTTP2-Settings header). RFC 9113 deprecates this in favour of prior
// knowledge, which the server also speaks; some clients still use it.
func h2cUpgrade(r *http.Request) bool {
	return r.TLS == nil && r.ProtoMajor == 1 &&
		httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "h2c") &&
		httpguts.HeaderValuesContainsToken(r.Header["Connection"], "HTTP2-Settings") &&
		len(r.Header["Http2-Settings"]) == 1
}

// maxUpgradeBody bounds the request body read before switching: the body
// of the upgrading request must be complete before HTTP/2 frames follow.
const maxUpgradeBody = 64 << 10

// serveH2CUpgrade answers 101 Switching Protocols and serves the
// connection with h2s as HTTP/2, the upgrading request becoming stream 1.
// It returns false (nothing written) when the request cannot be upgraded;
// the caller then serves it as HTTP/1.1, as RFC 7540 allows.
func (p *Proxy) serveH2CUpgrade(h2s *h2.Server, w http.ResponseWriter, r *http.Request) bool {
	settings, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(r.Header.Get("Http2-Settings"), "="))
	if err != nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxUpgradeBody+1))
	if err != nil || len(body) > maxUpgradeBody {
		return false
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"); err != nil {
		_ = conn.Close()
		return true
	}
	if err := rw.Flush(); err != nil {
		_ = conn.Close()
		return true
	}
	up := r.Clone(r.Context())
	up.Body = io.NopCloser(strings.NewReader(string(body)))
	up.ContentLength = int64(len(body))
	for _, k := range []string{"Upgrade", "Connection", "Http2-Settings"} {
		up.Header.Del(k)
	}
	h2s.ServeConn(&bufferedConn{Conn: conn, r: rw.Reader}, h2.ConnOptions{
		Context:        context.WithoutCancel(r.Context()),
		UpgradeRequest: up,
		Settings:       settings,
	})
	return true
}

// bufferedConn reads what the HTTP/1.1 server had buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
