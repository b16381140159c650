package slowpath

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/novaedge/novaedge/slowpath/h2"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// accept is the accept loop of an HTTP socket: each connection is served
// as the current configuration's listener for the socket says. HTTP/1.x
// goes to the HTTP/1.x server; HTTP/2 with prior knowledge is handed from
// there to the HTTP/2 server, as are TLS connections whose handshake
// chose h2. The loop ends when the socket closes.
func (p *Proxy) accept(ln net.Listener, key sockets.Key, hs *httpServer) {
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
			hs.h1.Go(c, func(c net.Conn) net.Conn { return p.handshake(tls.Server(c, cfg), hs.h2) })
		default:
			hs.h1.Go(c, nil)
		}
	}
}

// handshake completes a TLS handshake (within the read-header timeout)
// and returns the connection for the HTTP/1.x server, or nil when ALPN
// chose HTTP/2 (the HTTP/2 server serves it on a goroutine of its own) or
// the handshake failed (it is closed).
func (p *Proxy) handshake(tc *tls.Conn, h2s *h2.Server) net.Conn {
	if d := p.opts.ReadHeaderTimeout; d > 0 {
		_ = tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.Handshake(); err != nil {
		p.httpLog.Printf("TLS handshake error from %s: %v", tc.RemoteAddr(), err)
		_ = tc.Close()
		return nil
	}
	_ = tc.SetDeadline(time.Time{})
	if st := tc.ConnectionState(); st.NegotiatedProtocol == "h2" {
		go h2s.ServeConn(tc, h2.ConnOptions{Context: context.Background(), TLS: &st})
		return nil
	}
	return tc
}
