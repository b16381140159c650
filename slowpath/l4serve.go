package slowpath

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/certs"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/l4"
	"github.com/novaedge/novaedge/slowpath/lb"
	"github.com/novaedge/novaedge/slowpath/router"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// l4Mode is how an L4 listener treats a connection.
type l4Mode int

const (
	l4TCP         l4Mode = iota // proxy bytes to the route's backend
	l4Passthrough               // peek the ClientHello, route by SNI, proxy bytes
	l4Terminate                 // terminate TLS, proxy the plaintext
	l4UDP                       // relay datagrams per client
)

// l4Listener is a TCP, UDP or TLS listener served by the slow path.
type l4Listener struct {
	name   string
	mode   l4Mode
	tls    *tls.Config // l4Terminate
	routes []l4Route   // l4Passthrough: by SNI; otherwise one
	// idle closes connections (or UDP sessions) without traffic this long.
	idle time.Duration
}

// l4Route is one route of an L4 listener: the SNI names it takes (TLS
// passthrough; empty: any) and its weighted backends.
type l4Route struct {
	name      string
	hostnames []string
	backends  []router.Backend
}

// compileL4 builds an L4 listener from its routes.
func compileL4(l *pb.Listener, routes []*pb.Route, store *certs.Store) (*l4Listener, error) {
	out := &l4Listener{name: l.GetName(), idle: time.Hour}
	kind := pb.RouteKind_ROUTE_KIND_TCP
	switch l.GetProtocol() {
	case pb.Protocol_PROTOCOL_UDP:
		out.mode, kind, out.idle = l4UDP, pb.RouteKind_ROUTE_KIND_UDP, time.Minute
	case pb.Protocol_PROTOCOL_TLS:
		if l.GetTls().GetPassthrough() {
			out.mode, kind = l4Passthrough, pb.RouteKind_ROUTE_KIND_TLS
		} else {
			cfg, err := certs.ServerConfig(store, l.GetTls(), nil)
			if err != nil {
				return nil, err
			}
			out.mode, out.tls = l4Terminate, cfg
		}
	}
	for _, r := range routes {
		if r.GetKind() != kind || !slices.Contains(r.GetListeners(), l.GetName()) {
			continue
		}
		rt := l4Route{name: r.GetName()}
		for _, h := range r.GetHostnames() {
			rt.hostnames = append(rt.hostnames, strings.ToLower(h))
		}
		for _, rule := range r.GetRules() {
			for _, b := range rule.GetBackends() {
				rt.backends = append(rt.backends, router.Backend{Name: b.GetBackend(), Weight: b.GetWeight()})
			}
		}
		out.routes = append(out.routes, rt)
	}
	return out, nil
}

// route returns the route for a server name: an exact hostname, then the
// longest wildcard ("*.example.com" covers one or more labels), then a
// route without hostnames.
func (l *l4Listener) route(sni string) *l4Route {
	var best *l4Route
	bestLen := -1
	for i := range l.routes {
		r := &l.routes[i]
		if len(r.hostnames) == 0 {
			if bestLen < 0 {
				best, bestLen = r, 0
			}
			continue
		}
		for _, h := range r.hostnames {
			switch {
			case h == sni:
				return r
			case strings.HasPrefix(h, "*.") && strings.HasSuffix(sni, h[1:]) && len(h) > bestLen:
				best, bestLen = r, len(h)
			}
		}
	}
	return best
}

// l4Server serves an L4 listener's socket: a TCP accept loop or a UDP
// relay. It implements server.
type l4Server struct {
	p      *Proxy
	key    sockets.Key
	ctx    context.Context
	cancel context.CancelFunc
	ln     net.Listener
	udp    *l4.UDPProxy
	wg     sync.WaitGroup
	done   chan struct{}
}

func (p *Proxy) serveL4(s *sockets.Socket) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := &l4Server{p: p, key: s.Key, ctx: ctx, cancel: cancel, ln: s.Listener, done: make(chan struct{})}
	p.servers[s.Key] = srv
	p.log.Info("listener open", "socket", s.Key.String(), "protocol", "L4")
	if s.Key.Network == "udp" {
		srv.udp = &l4.UDPProxy{Conn: s.PacketConn, Pick: srv.pickUDP, Idle: time.Minute, Logger: p.log}
		go func() {
			defer close(srv.done)
			if err := srv.udp.Serve(ctx); err != nil {
				p.log.Error("listener stopped", "socket", s.Key.String(), "error", err)
			}
		}()
		return
	}
	go func() {
		defer close(srv.done)
		for {
			c, err := s.Listener.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					p.log.Error("listener stopped", "socket", s.Key.String(), "error", err)
				}
				return
			}
			srv.wg.Go(func() { srv.handle(c) })
		}
	}()
}

// Shutdown waits for the accept loop to end (the socket is closed by the
// caller) and for open connections to finish, until ctx ends; then it
// closes what is left.
func (s *l4Server) Shutdown(ctx context.Context) error {
	if s.udp != nil {
		s.cancel()
		<-s.done
		return nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		s.cancel()
		<-finished
	}
	return nil
}

// Close ends every connection now.
func (s *l4Server) Close() error {
	s.cancel()
	return nil
}

// handle proxies one TCP connection.
func (s *l4Server) handle(c net.Conn) {
	p := s.p
	cfg := p.cfg.Load()
	l := cfg.l4[s.key]
	if l == nil {
		_ = c.Close()
		return
	}
	var (
		rt  *l4Route
		sni string
	)
	switch l.mode {
	case l4Passthrough:
		hello, rc, err := l4.PeekClientHello(c, time.Now().Add(10*time.Second))
		c = rc
		if err != nil {
			p.log.Debug("TLS passthrough: no ClientHello", "listener", l.name, "client", c.RemoteAddr().String(), "error", err)
			_ = c.Close()
			return
		}
		sni = hello.ServerName
		rt = l.route(sni)
	case l4Terminate:
		tc := tls.Server(c, l.tls)
		hctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			p.log.Debug("TLS handshake failed", "listener", l.name, "client", c.RemoteAddr().String(), "error", err)
			_ = c.Close()
			return
		}
		c = tc
		if len(l.routes) > 0 {
			rt = &l.routes[0]
		}
	default:
		if len(l.routes) > 0 {
			rt = &l.routes[0]
		}
	}
	if rt == nil {
		p.log.Debug("no route for connection", "listener", l.name, "sni", sni)
		_ = c.Close()
		return
	}
	name := pickWeighted(rt.backends)
	be := cfg.backends[name]
	if be == nil {
		p.log.Warn("route backend missing", "route", rt.name, "backend", name)
		_ = c.Close()
		return
	}
	up, ep, err := s.dial(be, remoteAddrIP(c))
	if err != nil {
		p.log.Warn("upstream connection failed", "route", rt.name, "backend", be.name, "listener", l.name, "error", err)
		p.metrics.requests.WithLabelValues(l.name, rt.name, be.name, "502").Inc()
		_ = c.Close()
		return
	}
	defer ep.End()
	be.state.active.Add(1)
	defer be.state.active.Add(-1)
	stats, err := l4.Pipe(s.ctx, c, up, l.idle)
	p.metrics.requests.WithLabelValues(l.name, rt.name, be.name, "tcp").Inc()
	if err != nil && !errors.Is(err, l4.ErrIdleTimeout) && !errors.Is(err, context.Canceled) {
		p.log.Debug("connection ended with an error", "route", rt.name, "backend", be.name, "endpoint", ep.Addr,
			"up", stats.ClientToUpstream, "down", stats.UpstreamToClient, "error", err)
	}
}

// dial connects to an endpoint of be chosen by its balancer, trying up to
// three endpoints when connecting fails (as Envoy's connect retries do);
// failures feed outlier detection.
func (s *l4Server) dial(be *backend, client netip.Addr) (net.Conn, *endpoint.Endpoint, error) {
	var tried [3]*endpoint.Endpoint
	n := 0
	req := lb.Request{Tried: func(e *endpoint.Endpoint) bool {
		for _, t := range tried[:n] {
			if t == e {
				return true
			}
		}
		return false
	}}
	if client.IsValid() {
		req.Hash, req.HasHash = lb.HashString(client.String()), true
	}
	var errs []error
	for n < len(tried) {
		req.Now = time.Now()
		ep := be.balancer.Pick(&req)
		if ep == nil {
			errs = append(errs, errNoEndpoint)
			break
		}
		tried[n] = ep
		n++
		d := net.Dialer{Timeout: be.connectTimeout}
		ep.Begin()
		c, err := d.DialContext(s.ctx, "tcp", ep.Addr)
		if err == nil {
			s.report(be, ep, health.Success)
			return c, ep, nil
		}
		ep.End()
		s.report(be, ep, health.ConnectFailure)
		errs = append(errs, fmt.Errorf("%s: %w", ep.Addr, err))
	}
	return nil, nil, errors.Join(errs...)
}

func (s *l4Server) report(be *backend, ep *endpoint.Endpoint, r health.Result) {
	s.p.metrics.upstream.WithLabelValues(be.name, resultName(r)).Inc()
	if o := be.state.outlier; o != nil {
		o.Report(ep, r)
	}
}

// pickUDP chooses the upstream of a new UDP session.
func (s *l4Server) pickUDP(client netip.AddrPort) (string, bool) {
	cfg := s.p.cfg.Load()
	l := cfg.l4[s.key]
	if l == nil || len(l.routes) == 0 {
		return "", false
	}
	be := cfg.backends[pickWeighted(l.routes[0].backends)]
	if be == nil {
		return "", false
	}
	ep := be.balancer.Pick(&lb.Request{Now: time.Now(), Hash: lb.HashString(client.Addr().String()), HasHash: true})
	if ep == nil {
		return "", false
	}
	return ep.Addr, true
}

func remoteAddrIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
