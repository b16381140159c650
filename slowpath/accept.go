package slowpath

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/novaedge/novaedge/slowpath/h1"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// accept is the accept loop of an HTTP socket: each connection is served
// as the current configuration's listener for the socket says. Plaintext
// HTTP/1.x goes to the own server (h1), TLS and HTTP/2 with prior
// knowledge to net/http's, through feed. The loop ends, closing feed,
// when the socket closes.
func (p *Proxy) accept(ln net.Listener, key sockets.Key, h1s *h1.Server, feed *connFeed) {
	defer func() { _ = feed.Close() }()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as net/http
			// does, rather than spin or give the socket up.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Error("accept failed", "socket", key.String(), "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		l := p.cfg.Load().listeners[key]
		switch {
		case l == nil:
			// The listener is being removed.
			_ = c.Close()
		case l.tls != nil:
			cfg := l.tls
			h1s.Go(c, func(c net.Conn) net.Conn { return p.handshake(tls.Server(c, cfg), feed) })
		default:
			h1s.Go(c, nil)
		}
	}
}

// handshake completes a TLS handshake (within the read-header timeout)
// and returns the connection for the own HTTP/1.x server, or nil when
// ALPN chose HTTP/2 (it goes to net/http's server through feed) or the
// handshake failed (it is closed).
func (p *Proxy) handshake(tc *tls.Conn, feed *connFeed) net.Conn {
	if d := p.opts.ReadHeaderTimeout; d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.Handshake(); err != nil {
		p.httpLog.Printf("TLS handshake error from %s: %v", tc.RemoteAddr(), err)
		_ = tc.Close()
		return nil
	}
	_ = tc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		feed.push(tc)
		return nil
	}
	return tc
}

// connFeed is the listener net/http's server accepts from: connections
// the accept loop or the h1 server hand it.
type connFeed struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnFeed(addr net.Addr) *connFeed {
	return &connFeed{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next connection handed over.
func (f *connFeed) Accept() (net.Conn, error) {
	select {
	case c := <-f.ch:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

// push hands c to the server; once the feed is closed, c is closed.
func (f *connFeed) push(c net.Conn) {
	select {
	case f.ch <- c:
	case <-f.done:
		_ = c.Close()
	}
}

// Close ends Accept.
func (f *connFeed) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

// Addr is the socket's address.
func (f *connFeed) Addr() net.Addr { return f.addr }
