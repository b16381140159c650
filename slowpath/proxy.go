package slowpath

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novaedge/novaedge/agent"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/h1"
	"github.com/novaedge/novaedge/slowpath/h2"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/internal/workpool"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// Options configure the slow path.
type Options struct {
	// Logger logs listener changes and one line per failed upstream
	// request. Nil: discard.
	Logger *slog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers (slow-client protection). Zero: 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes client keep-alive connections idle this long.
	// Zero: 120s.
	IdleTimeout time.Duration
	// SendTimeout closes an HTTP/1.x or HTTP/2 client connection that
	// takes none of a response for this long (slow-read protection, as
	// nginx's send_timeout). Zero: 60s.
	SendTimeout time.Duration
	// MaxHeaderBytes bounds request headers; larger ones get 431. Zero:
	// 64 KiB.
	MaxHeaderBytes int
	// DrainTimeout bounds how long requests on a removed listener may
	// finish. QUIC connections on a socket handed to a successor with
	// steering (sockets.Socket.HandedOff) run untouched for up to half of
	// it, then get GOAWAY and the rest to finish. Zero: 30s.
	DrainTimeout time.Duration
	// MaxURIBytes bounds the request target; longer ones get 414. Zero:
	// 8 KiB.
	MaxURIBytes int
	// MaxRequestBodyBytes bounds request bodies; larger ones get 413.
	// Zero: no limit (bodies are streamed, not buffered).
	MaxRequestBodyBytes int64
	// Sockets is the socket set to serve on. Nil: a new one.
	Sockets *sockets.Set
	// QUICKeys are the HTTP/3 servers' stateless-reset and token keys,
	// which the agent keeps across restarts (LoadQUICKeys). Nil: no
	// stateless resets are sent, and a restart leaves the clients of
	// connections it lost to their idle timeout.
	QUICKeys *QUICKeys
	// Registry receives the slow path's metrics. Nil: not exported.
	Registry prometheus.Registerer
	// ServeFastPlan makes the slow path also serve the TCP, UDP and TLS
	// listeners the plan gives to the XDP fast path: set it while no fast
	// path runs on this node, so those services still answer.
	ServeFastPlan bool
	// NoRawPath turns the raw request path off (see raw.go): every
	// HTTP/1.x and HTTP/2 request then gets a header map, as HTTP/3
	// requests do. For comparisons and as a way out should the path
	// misbehave.
	NoRawPath bool
}

// Proxy is the slow path. It implements agent.Applier: each snapshot is
// compiled into a Config and switched to atomically.
type Proxy struct {
	opts    Options
	log     *slog.Logger
	httpLog *log.Logger
	metrics *metrics
	cfg     atomic.Pointer[Config]
	// exchanges pools per-request state (see exchange).
	exchanges sync.Pool

	// Owned by the agent's goroutine (Compile and the switch), and by
	// Close.
	mu         sync.Mutex
	socks      *sockets.Set
	servers    map[sockets.Key]server
	states     map[string]*backendState
	endpoints  map[string]*endpoint.Endpoint
	transports map[transportKey]upstreamTransport
	closed     bool
}

var _ agent.Applier = (*Proxy)(nil)

// New returns a slow path with no configuration: it serves nothing until
// the first snapshot is switched to.
func New(opts Options) *Proxy {
	if opts.ReadHeaderTimeout == 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.SendTimeout == 0 {
		opts.SendTimeout = 60 * time.Second
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 120 * time.Second
	}
	if opts.MaxHeaderBytes == 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.MaxURIBytes == 0 {
		opts.MaxURIBytes = 8 << 10
	}
	p := &Proxy{
		opts:       opts,
		log:        opts.Logger,
		socks:      opts.Sockets,
		servers:    map[sockets.Key]server{},
		states:     map[string]*backendState{},
		endpoints:  map[string]*endpoint.Endpoint{},
		transports: map[transportKey]upstreamTransport{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.socks == nil {
		p.socks = sockets.NewSet()
	}
	p.socks.SetLogger(p.log.With("component", "sockets"))
	p.httpLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.metrics = newMetrics(opts.Registry)
	if opts.Registry != nil {
		// A second proxy in one process (tests) keeps the first's.
		if err := opts.Registry.Register(newSteeringCollector(p.socks)); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			p.log.Error("QUIC steering metrics not registered", "error", err)
		}
	}
	return p
}

// Name returns "slowpath".
func (p *Proxy) Name() string { return "slowpath" }

// Compile builds the Config of snap without changing what runs; an error
// (a route that does not compile, a certificate that does not parse)
// rejects the snapshot.
func (p *Proxy) Compile(snap *pb.ConfigSnapshot) (agent.Change, error) {
	p.mu.Lock()
	cfg, err := p.compile(snap)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return agent.ChangeFunc(func(ctx context.Context) error { return p.Switch(ctx, cfg) }), nil
}

// Keys returns the sockets being served.
func (p *Proxy) Keys() []sockets.Key { return p.socks.Keys() }

// Switch puts cfg in service: it opens the sockets cfg adds, swaps the
// configuration in one atomic store (from then on every new request and
// connection sees it; requests in flight finish on the one they started
// with), then closes the sockets cfg dropped, letting their requests drain,
// and releases state no backend uses any more.
func (p *Proxy) Switch(ctx context.Context, cfg *Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("slow path is closed")
	}
	for name, st := range cfg.newStates {
		p.states[name] = st
	}
	for k, e := range cfg.newEndpoints {
		p.endpoints[k] = e
	}
	for k, tr := range cfg.newTransports {
		p.transports[k] = tr
	}

	// A socket whose kind of server changes (HTTP, HTTP/3, L4) is closed
	// and opened again for the new kind.
	for _, k := range cfg.keys {
		if srv, ok := p.servers[k]; ok && serverKind(srv) != cfg.kind(k) {
			p.remove(k)
		}
	}
	_, openErr := p.socks.Open(ctx, cfg.keys)
	// Health state is set up before the configuration is published, so no
	// request sees a backend without its outlier detection.
	for _, be := range cfg.backends {
		p.updateHealth(be)
	}
	p.cfg.Store(cfg)
	// Serve every socket of the configuration that has no server yet:
	// those just opened and those adopted from a previous process.
	for _, k := range cfg.keys {
		if _, ok := p.servers[k]; ok {
			continue
		}
		if s, ok := p.socks.Get(k); ok {
			p.serve(s)
		}
	}

	// Drop what the new configuration does not use. A TCP listener closes
	// at once (no new connections) and its requests drain; a QUIC server
	// is shut down before its UDP socket closes, because closing the socket
	// would cut every QUIC connection on it.
	for _, k := range p.socks.Keys() {
		if slices.Contains(cfg.keys, k) {
			continue
		}
		p.remove(k)
	}
	for name, st := range p.states {
		if _, ok := cfg.backends[name]; !ok {
			st.stop()
			delete(p.states, name)
		}
	}
	for k := range p.endpoints {
		if !slices.Contains(cfg.endpointKeys, k) {
			delete(p.endpoints, k)
		}
	}
	for k, tr := range p.transports {
		if !slices.Contains(cfg.transportKeys, k) {
			tr.CloseIdleConnections()
			delete(p.transports, k)
		}
	}
	return openErr
}

// remove stops serving socket k: a TCP listener closes at once and its
// connections drain; a UDP socket closes after its server has stopped.
func (p *Proxy) remove(k sockets.Key) {
	sock, ok := p.socks.Detach(k)
	srv := p.servers[k]
	delete(p.servers, k)
	if ok && k.Network == "tcp" {
		_ = sock.Listener.Close()
	}
	go func() {
		if srv != nil {
			p.drain(srv)
		}
		if ok && k.Network == "udp" {
			_ = sock.Close()
		}
	}()
	p.log.Info("listener closed", "socket", k.String())
}

// serverKind names what serves a socket.
func serverKind(s server) string {
	switch s.(type) {
	case *l4Server:
		return "l4"
	case *quicServer:
		return "quic"
	}
	return "http"
}

// kind says which server a configuration wants on socket k.
func (cfg *Config) kind(k sockets.Key) string {
	switch {
	case cfg.l4[k] != nil:
		return "l4"
	case k.Network == "udp":
		return "quic"
	}
	return "http"
}

// updateHealth (re)starts the backend's active checks and outlier detection
// with the configuration's settings, keeping every endpoint's verdict.
func (p *Proxy) updateHealth(be *backend) {
	st := be.state
	if be.healthCfg == nil {
		if st.checker != nil {
			st.checker.Stop()
			st.checker = nil
			for _, e := range be.endpoints {
				e.SetActiveHealthy(true)
			}
		}
	} else if st.checker == nil {
		st.checker = health.NewChecker(*be.healthCfg, health.Options{Logger: p.log.With("backend", be.name), OnChange: p.metrics.onHealth(be.name)})
		for _, e := range be.endpoints {
			p.metrics.healthy.WithLabelValues(be.name, e.Addr).Set(1)
		}
		st.checker.Update(be.checked())
	} else {
		st.checker.Reconfigure(*be.healthCfg)
		st.checker.Update(be.checked())
	}
	st.probed = be.checked()
	st.probing = be.healthCfg != nil
	if st.outlier == nil {
		st.outlier = health.NewOutlier(be.outlierCfg, health.Options{Logger: p.log.With("backend", be.name), OnChange: p.metrics.onEjection(be.name)})
	} else {
		st.outlier.Reconfigure(be.outlierCfg)
	}
	st.outlier.Update(be.endpoints)
}

// ProbeFailures returns the endpoints ("address:port") that this node's
// active health checks find unhealthy now, sorted. The agent reports them to
// the controller, which decides for every node.
func (p *Proxy) ProbeFailures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, st := range p.states {
		if !st.probing {
			continue
		}
		for _, e := range st.probed {
			if !e.ActiveHealthy() {
				out = append(out, e.Addr)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (st *backendState) stop() {
	if st.checker != nil {
		st.checker.Stop()
		st.checker = nil
	}
}

// serve starts the HTTP server of a new socket. It serves plaintext
// HTTP/1.1 and HTTP/2 with prior knowledge, and, when the socket's current
// listener terminates TLS, HTTP/1.1 and HTTP/2 over TLS (ALPN); which one
// is decided per connection from the configuration at accept time.
func (p *Proxy) serve(s *sockets.Socket) {
	key := s.Key
	if p.cfg.Load().kind(key) == "l4" {
		p.serveL4(s)
		return
	}
	hs := &httpServer{served: make(chan struct{})}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h2cUpgrade(r) && p.serveH2CUpgrade(hs.h2, w, r) {
			return
		}
		if r.ProtoMajor == 3 {
			// quic-go starts a goroutine per stream: run on a worker
			// whose stack has grown (the HTTP/2 server's handlers run on
			// its own workers).
			streamWorkers.Run(func() { p.serveHTTP(key, w, r) })
			return
		}
		p.serveHTTP(key, w, r)
	})
	if key.Network == "udp" {
		p.serveQUIC(s, handler)
		return
	}
	hs.h2 = &h2.Server{
		Handler:           handler,
		MaxHeaderBytes:    p.opts.MaxHeaderBytes,
		IdleTimeout:       p.opts.IdleTimeout,
		ReadHeaderTimeout: p.opts.ReadHeaderTimeout,
		SendTimeout:       p.opts.SendTimeout,
		Log:               p.log,
		// The proxy is done with a request's header when it returns.
		ReuseRequestHeader: true,
	}
	hs.h1 = &h1.Server{
		Handler:           handler,
		ReadHeaderTimeout: p.opts.ReadHeaderTimeout,
		IdleTimeout:       p.opts.IdleTimeout,
		SendTimeout:       p.opts.SendTimeout,
		MaxHeaderBytes:    p.opts.MaxHeaderBytes,
		// A plaintext connection that is not HTTP/1.x: HTTP/2 with prior
		// knowledge, or an invalid preface the HTTP/2 server closes. Its
		// goroutine goes on as the HTTP/2 connection's.
		Handoff: func(c net.Conn) { hs.h2.ServeConn(c, h2.ConnOptions{Context: context.Background()}) },
		Log:     p.log,
	}
	if !p.opts.NoRawPath {
		hs.h1.Raw = &rawHandler{p: p, key: key}
		hs.h2.Raw = &rawH2Handler{p: p, key: key}
	}
	p.servers[key] = hs
	p.log.Info("listener open", "socket", key.String())
	go func() {
		defer close(hs.served)
		p.accept(s.Listener, key, hs)
	}()
}

// httpServer is a socket's HTTP/1.x and HTTP/2 servers, both our own
// (slowpath/h1, slowpath/h2). Draining waits for the accept loop to end
// (the listener is closed first), then both servers drain at once:
// HTTP/1.x connections close after the response they are writing, HTTP/2
// ones get GOAWAY and close once their streams are done.
type httpServer struct {
	h1     *h1.Server
	h2     *h2.Server
	served chan struct{} // closed when the accept loop ended
}

// Shutdown drains as described on httpServer; the listener must be closed
// already.
func (h *httpServer) Shutdown(ctx context.Context) error {
	select {
	case <-h.served:
	case <-ctx.Done():
		return h.Close()
	}
	h1done := make(chan error, 1)
	go func() { h1done <- h.h1.Shutdown(ctx) }()
	return errors.Join(h.h2.Shutdown(ctx), <-h1done)
}

// Close closes both servers' connections.
func (h *httpServer) Close() error {
	return errors.Join(h.h1.Close(), h.h2.Close())
}

// server is an HTTP server on one socket: *httpServer (TCP), *quicServer
// (QUIC) or *l4Server.
type server interface {
	Shutdown(ctx context.Context) error
	Close() error
}

// drain lets a removed listener's requests finish.
func (p *Proxy) drain(srv server) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.DrainTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
}

// Close stops serving: sockets close and requests in flight get
// DrainTimeout to finish.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.servers = map[sockets.Key]server{}
	// A QUIC socket whose group a successor took over stays open until its
	// connections have drained (the successor reads its own socket);
	// every other socket closes now.
	handedOff := map[sockets.Key]*sockets.Socket{}
	for _, k := range p.socks.Keys() {
		sock, _ := p.socks.Detach(k)
		if _, quic := servers[k].(*quicServer); quic && sock.HandedOff() {
			handedOff[k] = sock
			continue
		}
		_ = sock.Close()
	}
	for _, st := range p.states {
		st.stop()
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for k, srv := range servers {
		wg.Go(func() {
			p.drain(srv)
			if sock := handedOff[k]; sock != nil {
				_ = sock.Close()
			}
		})
	}
	wg.Wait()
	for _, tr := range p.transports {
		tr.CloseIdleConnections()
	}
}

// String names the proxy for logs.
func (p *Proxy) String() string { return fmt.Sprintf("slowpath(%d sockets)", len(p.socks.Keys())) }

// Sockets returns the socket set the proxy serves, for handing it to a
// successor or inheriting a predecessor's (sockets.Set.ServeHandoff,
// Inherit).
func (p *Proxy) Sockets() *sockets.Set { return p.socks }

// streamWorkers run the HTTP/2 and HTTP/3 requests of every proxy in the
// process (see package workpool): up to 4096 at once, beyond which a
// stream runs on its own goroutine; 64 idle workers stay, others leave
// after 30 s idle.
var streamWorkers = workpool.New(4096, 64, 30*time.Second)
