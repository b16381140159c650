package slowpath

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/novaedge/novaedge/slowpath/sockets"
	"github.com/novaedge/novaedge/slowpath/sockets/quicsteer"
)

// quicServer is the HTTP/3 server of one UDP socket. It runs on its own
// quic.Transport so that the connection IDs it issues carry the process's
// generation (quicsteer.ConnIDGenerator): after an agent restart the
// kernel keeps steering this process's connections to its socket (see
// sockets.Set.SteerQUIC), and Shutdown lets them run on.
type quicServer struct {
	*http3.Server
	tr   *quic.Transport
	ln   *quic.EarlyListener
	sock *sockets.Socket
	// live counts QUIC connections, from the first packet until closed.
	live atomic.Int64
}

var _ server = (*quicServer)(nil)

// track counts a new connection until its context ends (when the
// connection closes or its handshake fails). It is quic.Transport.ConnContext.
func (q *quicServer) track(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	q.live.Add(1)
	context.AfterFunc(ctx, func() { q.live.Add(-1) })
	return ctx, nil
}

// Shutdown stops the server. If a successor took the socket's reuseport
// group over (sockets.Socket.HandedOff), the connections are this
// process's to finish: no new ones are accepted (the successor gets them),
// and for up to half of ctx's time the connections run untouched, clients
// sending new requests on them as they like, until they close on their
// own; then, as always, GOAWAY tells clients to finish and move on, and
// the rest of ctx's time is for the requests in flight.
func (q *quicServer) Shutdown(ctx context.Context) error {
	// No new connections: a closed listener refuses handshakes instead of
	// completing them into an accept queue nobody reads any more.
	_ = q.ln.Close()
	if q.sock.HandedOff() {
		end := time.Now().Add(time.Hour)
		if d, ok := ctx.Deadline(); ok {
			end = time.Now().Add(time.Until(d) / 2)
		}
		t := time.NewTicker(10 * time.Millisecond)
		for q.live.Load() > 0 && time.Now().Before(end) && ctx.Err() == nil {
			<-t.C
		}
		t.Stop()
	}
	err := q.Server.Shutdown(ctx)
	return errors.Join(err, q.close())
}

// Close closes the server's connections at once.
func (q *quicServer) Close() error {
	return errors.Join(q.Server.Close(), q.close())
}

// close stops the listener and the transport's reading (the socket itself
// is the caller's to close).
func (q *quicServer) close() error {
	err := q.ln.Close()
	if errors.Is(err, quic.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, q.tr.Close())
}

// serveQUIC starts an HTTP/3 server on a UDP socket. Its TLS
// configuration is looked up per connection, so a reload that changes
// certificates applies to the next handshake. New connections come to
// this process once it serves the socket: it becomes the newest
// generation of the socket's reuseport group (without steering, which the
// socket set logs once, the socket is served as it is).
func (p *Proxy) serveQUIC(s *sockets.Socket, handler http.Handler) {
	key := s.Key
	tlsConf := http3.ConfigureTLSConfig(&tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			ln := p.cfg.Load().listeners[key]
			if ln == nil || ln.tls == nil {
				return nil, fmt.Errorf("no HTTP/3 listener on %s", key)
			}
			return ln.tls, nil
		},
	})
	q := &quicServer{
		Server: &http3.Server{Handler: handler, TLSConfig: tlsConf, MaxHeaderBytes: p.opts.MaxHeaderBytes, IdleTimeout: p.opts.IdleTimeout},
		sock:   s,
	}
	q.tr = &quic.Transport{
		Conn:                  s.PacketConn,
		ConnectionIDGenerator: quicsteer.ConnIDGenerator{Generation: p.socks.Generation()},
		ConnContext:           q.track,
	}
	if k := p.opts.QUICKeys; k != nil {
		q.tr.StatelessResetKey, q.tr.TokenGeneratorKey = &k.Reset, &k.Token
	}
	// The configuration http3.Server.Serve would use.
	ln, err := q.tr.ListenEarly(tlsConf, &quic.Config{Allow0RTT: true})
	if err != nil {
		p.log.Error("listener not served", "socket", key.String(), "protocol", "HTTP/3", "error", err)
		return
	}
	q.ln = ln
	// Steering failures are logged once by the set; the socket is served
	// either way.
	_ = p.socks.SteerQUIC(key)
	p.servers[key] = q
	p.log.Info("listener open", "socket", key.String(), "protocol", "HTTP/3", "generation", p.socks.Generation())
	go func() {
		if err := q.ServeListener(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, quic.ErrServerClosed) {
			p.log.Error("listener stopped", "socket", key.String(), "error", err)
		}
	}()
}

// QUICKeys are the secrets of the HTTP/3 servers that must outlive the
// agent process: with the same keys, the agent that follows (after an
// upgrade, a restart or a crash) answers a packet of a connection it does
// not know with a stateless reset the client accepts (RFC 9000, 10.3), so
// the client reconnects at once instead of waiting out its idle timeout,
// and address-validation tokens issued before stay valid.
type QUICKeys struct {
	// Reset derives the stateless reset tokens of the connection IDs.
	Reset quic.StatelessResetKey
	// Token protects the tokens clients present to skip address
	// validation.
	Token quic.TokenGeneratorKey
}

// quicKeysSize is the file LoadQUICKeys keeps: the two keys, in order.
const quicKeysSize = len(quic.StatelessResetKey{}) + len(quic.TokenGeneratorKey{})

// LoadQUICKeys returns the keys kept in the file path, creating the file
// (mode 0600, random keys) when it does not exist or does not hold keys;
// created says it did. The file is written whole under another name and
// renamed, so a crash never leaves half a key behind.
func LoadQUICKeys(path string) (keys *QUICKeys, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == quicKeysSize {
		keys = &QUICKeys{}
		n := copy(keys.Reset[:], b)
		copy(keys.Token[:], b[n:])
		return keys, false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("QUIC keys %s: %w", path, err)
	}
	b = make([]byte, quicKeysSize)
	if _, err := rand.Read(b); err != nil {
		return nil, false, fmt.Errorf("QUIC keys: %w", err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, false, fmt.Errorf("QUIC keys %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, false, fmt.Errorf("QUIC keys %s: %w", path, err)
	}
	keys = &QUICKeys{}
	n := copy(keys.Reset[:], b)
	copy(keys.Token[:], b[n:])
	return keys, true, nil
}
