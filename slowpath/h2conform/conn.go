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
	w batchWriter // once the filter found HTTP/2 (f.h2)
}

func (c *plainConn) Read(p []byte) (int, error) { return c.f.Read(p) }

// Write batches HTTP/2's writes (see batchWriter); HTTP/1.x writes go
// straight to the connection.
func (c *plainConn) Write(p []byte) (int, error) {
	if c.f.h2.Load() {
		return c.w.Write(p)
	}
	return c.Conn.Write(p)
}

// Close writes what HTTP/2 left pending (a GOAWAY) before closing.
func (c *plainConn) Close() error {
	if c.f.h2.Load() {
		return c.w.close()
	}
	return c.Conn.Close()
}

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
	if c.f.h2.Load() {
		// After the pending bytes, in order.
		return io.Copy(struct{ io.Writer }{c}, r)
	}
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
	w batchWriter
}

func (c *tlsConn) Read(p []byte) (int, error) { return c.f.Read(p) }

// Write batches the HTTP/2 server's writes (see batchWriter), which also
// puts several frames in one TLS record.
func (c *tlsConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close writes what is pending (a GOAWAY) before closing.
func (c *tlsConn) Close() error { return c.w.close() }

var (
	_ net.Conn = (*plainConn)(nil)
	_ net.Conn = (*tlsConn)(nil)
)
