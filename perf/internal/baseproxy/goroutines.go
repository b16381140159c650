package baseproxy

import (
	"bytes"
	"fmt"
	"net"
	"sync"
)

// ServeGoroutines is Serve's twin built the ordinary Go way: a goroutine
// per client connection blocking in net.Conn reads and writes, so every
// wait parks the goroutine and the runtime's poller wakes it. Parsing and
// forwarding are the same as Serve's. The rate between the two is what a
// goroutine per connection costs on this machine, apart from any HTTP
// work.
func ServeGoroutines(addr, backend string) error {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	p := &gpool{backend: backend}
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go p.serve(c)
	}
}

type gconn struct {
	net.Conn
	in []byte // bytes read and not yet forwarded
}

// fill reads once more into c.in; false when the connection failed, ended
// or sent a head larger than 64 KiB.
func (c *gconn) fill() bool {
	if len(c.in) == cap(c.in) {
		if cap(c.in) >= 64<<10 {
			return false
		}
		c.in = append(c.in, 0)[:len(c.in)]
	}
	n, err := c.Read(c.in[len(c.in):cap(c.in)])
	c.in = c.in[:len(c.in)+n]
	return err == nil && n > 0
}

// head reads until c.in holds a complete head and returns its length, or
// -1 when the connection failed first.
func (c *gconn) head() int {
	for {
		if i := bytes.Index(c.in, []byte("\r\n\r\n")); i >= 0 {
			return i + 4
		}
		if !c.fill() {
			return -1
		}
	}
}

type gpool struct {
	backend string
	mu      sync.Mutex
	idle    []*gconn
}

func (p *gpool) get() *gconn {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		u := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return u
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp4", p.backend)
	if err != nil {
		return nil
	}
	return &gconn{Conn: c, in: make([]byte, 0, 16<<10)}
}

func (p *gpool) put(u *gconn) {
	p.mu.Lock()
	p.idle = append(p.idle, u)
	p.mu.Unlock()
}

func (p *gpool) serve(nc net.Conn) {
	c := &gconn{Conn: nc, in: make([]byte, 0, 16<<10)}
	defer func() { _ = c.Close() }()
	for {
		end := c.head()
		if end < 0 {
			return
		}
		if contentLength(c.in[:end]) != 0 {
			return // a body: not this measuring stick's business
		}
		u := p.get()
		if u == nil {
			return
		}
		if !p.exchange(c, u, end) {
			_ = u.Close()
			return
		}
		c.in = c.in[:copy(c.in, c.in[end:])]
		p.put(u)
	}
}

// exchange sends the head c.in[:end] over u and u's complete answer back.
func (p *gpool) exchange(c, u *gconn, end int) bool {
	if _, err := u.Write(c.in[:end]); err != nil {
		return false
	}
	hend := u.head()
	if hend < 0 {
		return false
	}
	cl := contentLength(u.in[:hend])
	if cl < 0 {
		return false
	}
	total := hend + cl
	for len(u.in) < total {
		if !u.fill() {
			return false
		}
	}
	if _, err := c.Write(u.in[:total]); err != nil {
		return false
	}
	u.in = u.in[:copy(u.in, u.in[total:])]
	return true
}
