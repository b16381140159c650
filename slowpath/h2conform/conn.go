package h2conform

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
)

// plainConn is a plaintext connection whose reads pass through the filter:
// sniffed first, then HTTP/1.x passed through unchanged or HTTP/2 frames
// inspected. It deliberately has no ConnectionState method: net/http would
// take one for TLS.
type plainConn struct {
	net.Conn
	f filter
}

func (c *plainConn) Read(p []byte) (int, error) { return c.f.Read(p) }

// CloseWrite half-closes the connection, as net/http does after an
// HTTP/1.1 response it must not read past.
func (c *plainConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom keeps sendfile and splice for writes, which the filter never
// touches.
func (c *plainConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// WriteTo keeps splice for a hijacked connection (an upgrade copied to a
// backend) once the filter has stepped aside.
func (c *plainConn) WriteTo(w io.Writer) (int64, error) {
	if c.f.transparentAndEmpty() {
		return io.Copy(w, c.Conn)
	}
	return io.Copy(w, struct{ io.Reader }{c})
}

// tlsConn is an HTTP/2 connection over TLS whose reads pass through the
// filter. The embedded *tls.Conn provides ConnectionState, from which the
// HTTP/2 server fills Request.TLS and checks the TLS version and cipher.
type tlsConn struct {
	*tls.Conn
	f filter
}

func (c *tlsConn) Read(p []byte) (int, error) { return c.f.Read(p) }

var (
	_ net.Conn = (*plainConn)(nil)
	_ net.Conn = (*tlsConn)(nil)
)
