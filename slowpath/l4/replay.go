package l4

import (
	"errors"
	"fmt"
	"io"
	"net"
)

// ReplayConn is the connection PeekClientHello returns: its reads first
// return the bytes already peeked from the underlying connection, then
// continue on it. Writes, deadlines and Close go straight to the underlying
// connection. Like any net.Conn, it must not be read from concurrently.
type ReplayConn struct {
	net.Conn
	buf []byte
}

var (
	_ net.Conn    = (*ReplayConn)(nil)
	_ io.WriterTo = (*ReplayConn)(nil)
	_ closeWriter = (*ReplayConn)(nil)
)

// Read returns peeked bytes while any remain, then reads the underlying
// connection.
func (c *ReplayConn) Read(b []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(b, c.buf)
		c.take(n)
		return n, nil
	}
	return c.Conn.Read(b)
}

// Buffered returns the peeked bytes that reads have not returned yet. The
// slice aliases the internal buffer; it is valid until the next read.
func (c *ReplayConn) Buffered() []byte { return c.buf }

// NetConn returns the underlying connection. Reading it directly skips the
// Buffered bytes, which the caller must then forward itself (as Pipe does,
// to hand io.Copy the bare *net.TCPConn).
func (c *ReplayConn) NetConn() net.Conn { return c.Conn }

// WriteTo writes the Buffered bytes to w and then copies the underlying
// connection to w until EOF. io.Copy(w, c) calls it, so copying a ReplayConn
// over a *net.TCPConn into a *net.TCPConn still reaches the splice(2) path
// once the peeked prefix is written.
func (c *ReplayConn) WriteTo(w io.Writer) (int64, error) {
	var n int64
	if len(c.buf) > 0 {
		m, err := w.Write(c.buf)
		n += int64(m)
		c.take(m)
		if err != nil {
			return n, err
		}
	}
	m, err := io.Copy(w, c.Conn)
	return n + m, err
}

// CloseWrite shuts down the writing side of the underlying connection. It
// returns an error wrapping errors.ErrUnsupported when the underlying
// connection has no CloseWrite method.
func (c *ReplayConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("close write on %T: %w", c.Conn, errors.ErrUnsupported)
}

// take drops the first n buffered bytes, releasing the buffer once it is
// drained.
func (c *ReplayConn) take(n int) {
	c.buf = c.buf[n:]
	if len(c.buf) == 0 {
		c.buf = nil
	}
}

// closeWriter is implemented by *net.TCPConn, *net.UnixConn and *tls.Conn.
type closeWriter interface {
	CloseWrite() error
}
