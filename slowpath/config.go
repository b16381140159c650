package slowpath

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	gproto "google.golang.org/protobuf/proto"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/certs"
	"github.com/novaedge/novaedge/slowpath/compress"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/lb"
	"github.com/novaedge/novaedge/slowpath/router"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// Config is one compiled snapshot: what each socket serves and the
// backends. It is immutable; a new snapshot gives a new Config, swapped in
// with one atomic store.
type Config struct {
	version   uint64
	listeners map[sockets.Key]*listener
	// l4 are the TCP, UDP and TLS listeners this node serves in the slow
	// path (those the plan marks SLOW, and the FAST ones while no fast path
	// runs, Options.ServeFastPlan).
	l4       map[sockets.Key]*l4Listener
	backends map[string]*backend
	// keys are the sockets this configuration needs, sorted.
	keys []sockets.Key
	// What this configuration creates and uses of the proxy's long-lived
	// state; the switch registers the new and drops what is no longer used.
	newStates     map[string]*backendState
	newEndpoints  map[string]*endpoint.Endpoint // by "backend|address:port"
	endpointKeys  []string
	newTransports map[transportKey]upstreamTransport
	transportKeys []transportKey
}

// listener is one gateway listener on one socket.
type listener struct {
	name     string
	gateway  string
	protocol pb.Protocol
	port     uint32
	tls      *tls.Config // nil: plaintext
	router   *router.Router
	// redirect answers every request with a redirect to another scheme
	// (redirectScheme, or sslRedirect of the gateway's HTTPS listener).
	redirect *schemeRedirect
	// altSvc advertises the gateway's HTTP/3 listener on HTTPS responses;
	// altSvcVals is it as header values, shared by every response.
	altSvc     string
	altSvcVals []string
	// compress compresses responses (the gateway's compression); nil: off.
	compress *compress.Compressor
}

type schemeRedirect struct {
	scheme string
	port   uint32 // 0: the scheme's default
	status int
}

// served reports whether the slow path serves listeners of protocol p in
// this build.
func served(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_HTTP || p == pb.Protocol_PROTOCOL_HTTPS || p == pb.Protocol_PROTOCOL_HTTP3
}

// socketKeys returns the sockets a listener binds: its addresses, or every
// address (0.0.0.0 and ::) when it names none.
func socketKeys(l *pb.Listener) ([]sockets.Key, error) {
	addrs := l.GetAddresses()
	if len(addrs) == 0 {
		addrs = []string{"0.0.0.0", "::"}
	}
	if l.GetPort() == 0 || l.GetPort() > 65535 {
		return nil, fmt.Errorf("port %d out of range", l.GetPort())
	}
	var out []sockets.Key
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", a, err)
		}
		network := "tcp"
		if l.GetProtocol() == pb.Protocol_PROTOCOL_HTTP3 || l.GetProtocol() == pb.Protocol_PROTOCOL_UDP {
			network = "udp"
		}
		out = append(out, sockets.Key{Network: network, Addr: netip.AddrPortFrom(ip, uint16(l.GetPort()))})
	}
	return out, nil
}

// compile builds a Config from snap, reusing the long-lived state of p
// (endpoints, transports) where the snapshot keeps them. It changes
// nothing that runs.
func (p *Proxy) compile(snap *pb.ConfigSnapshot) (*Config, error) {
	c := snap.GetCluster()
	cfg := &Config{
		version:       snap.GetVersion(),
		listeners:     map[sockets.Key]*listener{},
		l4:            map[sockets.Key]*l4Listener{},
		backends:      map[string]*backend{},
		newStates:     map[string]*backendState{},
		newEndpoints:  map[string]*endpoint.Endpoint{},
		newTransports: map[transportKey]upstreamTransport{},
	}
	store, storeErr := certs.NewStore(c.GetCertificates())
	var errs []error

	// Which HTTP listener of each gateway redirects to HTTPS (sslRedirect),
	// and which HTTPS listeners advertise HTTP/3 (Alt-Svc).
	sslRedirect := map[string]*pb.Listener{}
	h3 := map[string]uint32{}
	for _, l := range c.GetListeners() {
		if l.GetProtocol() == pb.Protocol_PROTOCOL_HTTP3 {
			if _, ok := h3[l.GetGateway()]; !ok {
				h3[l.GetGateway()] = l.GetPort()
			}
		}
		if l.GetProtocol() == pb.Protocol_PROTOCOL_HTTPS && l.GetTls().GetSslRedirect() {
			if _, ok := sslRedirect[l.GetGateway()]; !ok {
				sslRedirect[l.GetGateway()] = l
			}
		}
	}

	// The routers in service, by listener: a router compiles only the
	// routes it was not given before (router.CompileFrom).
	prevRouters := map[string]*router.Router{}
	if cur := p.cfg.Load(); cur != nil {
		for _, ln := range cur.listeners {
			prevRouters[ln.name] = ln.router
		}
	}

	slowL4 := map[string]bool{}
	for _, e := range c.GetPlan() {
		if e.GetPath() == pb.DataPath_DATA_PATH_SLOW || p.opts.ServeFastPlan {
			slowL4[e.GetListener()] = true
		}
	}
	for _, l := range c.GetListeners() {
		if !served(l.GetProtocol()) {
			if !slowL4[l.GetName()] {
				continue // the XDP fast path serves it
			}
			l4l, err := compileL4(l, c.GetRoutes(), store)
			if err != nil {
				errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
				continue
			}
			keys, err := socketKeys(l)
			if err != nil {
				errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
				continue
			}
			for _, k := range keys {
				if _, dup := cfg.l4[k]; dup || cfg.listeners[k] != nil {
					errs = append(errs, fmt.Errorf("listener %s: %s is already served by another listener", l.GetName(), k))
					continue
				}
				cfg.l4[k] = l4l
				cfg.keys = append(cfg.keys, k)
			}
			continue
		}
		ln, err := p.compileListener(l, c.GetRoutes(), store, sslRedirect[l.GetGateway()], prevRouters[l.GetName()])
		if err == nil && l.GetProtocol() == pb.Protocol_PROTOCOL_HTTPS {
			if port, ok := h3[l.GetGateway()]; ok {
				ln.altSvc = fmt.Sprintf(`h3=":%d"; ma=86400`, port)
				ln.altSvcVals = []string{ln.altSvc}
			}
		}
		if err != nil {
			if storeErr != nil {
				err = fmt.Errorf("%w (%w)", err, storeErr)
			}
			errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
			continue
		}
		keys, err := socketKeys(l)
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
			continue
		}
		for _, k := range keys {
			if cfg.l4[k] != nil {
				errs = append(errs, fmt.Errorf("listener %s: %s is already served by another listener", l.GetName(), k))
				continue
			}
			if prev, dup := cfg.listeners[k]; dup {
				errs = append(errs, fmt.Errorf("listener %s: %s is already served by listener %s", l.GetName(), k, prev.name))
				continue
			}
			cfg.listeners[k] = ln
			cfg.keys = append(cfg.keys, k)
		}
	}
	slices.SortFunc(cfg.keys, sockets.Key.Compare)

	pems := map[string]*pb.Certificate{}
	for _, ct := range c.GetCertificates() {
		pems[ct.GetName()] = ct
	}
	for _, b := range c.GetBackends() {
		be, err := p.compileBackend(b, store, pems, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", b.GetName(), err))
			continue
		}
		cfg.backends[b.GetName()] = be
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (p *Proxy) compileListener(l *pb.Listener, routes []*pb.Route, store *certs.Store, ssl *pb.Listener, prev *router.Router) (*listener, error) {
	rt, err := router.CompileFrom(prev, l, routes)
	if err != nil {
		return nil, err
	}
	ln := &listener{name: l.GetName(), gateway: l.GetGateway(), protocol: l.GetProtocol(), port: l.GetPort(), router: rt}
	switch l.GetProtocol() {
	case pb.Protocol_PROTOCOL_HTTPS:
		ln.tls, err = certs.ServerConfig(store, l.GetTls(), []string{"h2", "http/1.1"})
	case pb.Protocol_PROTOCOL_HTTP3:
		ln.tls, err = certs.ServerConfig(store, l.GetTls(), []string{"h3"})
	}
	if err != nil {
		return nil, err
	}
	if rs := l.GetRedirectScheme(); rs != nil && rs.GetScheme() != "" {
		ln.redirect = &schemeRedirect{scheme: rs.GetScheme(), port: rs.GetPort(), status: int(cmp.Or(rs.GetStatusCode(), 301))}
	} else if ssl != nil && l.GetProtocol() == pb.Protocol_PROTOCOL_HTTP {
		ln.redirect = &schemeRedirect{scheme: "https", port: ssl.GetPort(), status: 301}
	}
	if c := l.GetCompression(); c != nil {
		cc, err := compress.FromProto(c)
		if err != nil {
			return nil, err
		}
		if ln.compress, err = compress.New(cc); err != nil {
			return nil, fmt.Errorf("compression: %w", err)
		}
	}
	if ln.redirect != nil {
		switch ln.redirect.status {
		case 301, 302, 303, 307, 308:
		default:
			return nil, fmt.Errorf("redirectScheme.statusCode: %d is not a redirect status (301, 302, 303, 307, 308)", ln.redirect.status)
		}
	}
	return ln, nil
}

func (p *Proxy) compileBackend(b *pb.Backend, store *certs.Store, pems map[string]*pb.Certificate, cfg *Config) (*backend, error) {
	proto := normProtocol(b.GetProtocol())
	st := p.states[b.GetName()]
	if st == nil {
		st = &backendState{name: b.GetName()}
		cfg.newStates[b.GetName()] = st
	}
	be := &backend{name: b.GetName(), protocol: proto, hash: b.GetHashPolicy(), state: st,
		connectTimeout: msOr(b.GetConnectTimeoutMs(), 5*time.Second)}

	var targets []lb.Target
	for _, ep := range b.GetEndpoints() {
		state := ep.GetState()
		if state == pb.EndpointState_ENDPOINT_STATE_DRAINING {
			continue // terminating: no new requests, nothing to probe
		}
		key := b.GetName() + "|" + endpointAddr(ep)
		e, ok := p.endpoints[key]
		if !ok {
			if e, ok = cfg.newEndpoints[key]; !ok {
				e = endpoint.New(endpointAddr(ep))
				cfg.newEndpoints[key] = e
			}
		}
		cfg.endpointKeys = append(cfg.endpointKeys, key)
		if state == pb.EndpointState_ENDPOINT_STATE_UNHEALTHY {
			// The controller took it out on the agents' probe results:
			// no requests, but still probed, or nobody would see it
			// recover.
			be.probed = append(be.probed, e)
			continue
		}
		be.endpoints = append(be.endpoints, e)
		targets = append(targets, lb.Target{EP: e, Weight: max(ep.GetWeight(), 1)})
	}
	var err error
	be.balancer, err = lb.New(b.GetLbPolicy(), targets, lb.Options{PanicThresholdPercent: b.GetPanicThresholdPercent()})
	if err != nil {
		return nil, fmt.Errorf("lbPolicy: %w", err)
	}

	cb := b.GetCircuitBreaker()
	be.limits = limits{maxRequests: int64(cb.GetMaxRequests()), maxPending: int64(cb.GetMaxPendingRequests()), maxConns: int64(cb.GetMaxConnections())}
	perHost := 0
	if n := len(be.endpoints); n > 0 && cb.GetMaxConnections() > 0 {
		perHost = max(1, int(cb.GetMaxConnections())/n)
	}
	t := b.GetTls()
	key := transportKey{
		protocol:        proto,
		tls:             usesTLS(proto, t),
		serverName:      t.GetServerName(),
		insecure:        t.GetInsecureSkipVerify(),
		connectTimeout:  msOr(b.GetConnectTimeoutMs(), 5*time.Second),
		idleTimeout:     msOr(b.GetIdleTimeoutMs(), 90*time.Second),
		maxConnsPerHost: perHost,
		ca:              t.GetCa(),
		clientCert:      t.GetClientCertificate(),
	}
	// The material itself is part of the key: a renewed certificate gives a
	// new transport (new connections), an unchanged one keeps the pool.
	if c := pems[key.ca]; c != nil {
		key.caPEM = string(c.GetCertPem())
	}
	if c := pems[key.clientCert]; c != nil {
		key.certPEM = string(c.GetCertPem()) + string(c.GetKeyPem())
	}
	tr, ok := p.transports[key]
	if !ok {
		if tr, ok = cfg.newTransports[key]; !ok {
			if tr, err = newTransport(key, store); err != nil {
				return nil, err
			}
			cfg.newTransports[key] = tr
		}
	}
	cfg.transportKeys = append(cfg.transportKeys, key)
	be.transport = tr

	if hc := b.GetHealthCheck(); hc != nil && hc.GetType() != "" {
		if hc.GetIntervalMs() > 0 && hc.GetTimeoutMs() > hc.GetIntervalMs() {
			// The builder warns about this; a probe cannot outlast its
			// interval, so the timeout is cut to it rather than the
			// snapshot rejected.
			hc = gproto.CloneOf(hc)
			hc.TimeoutMs = hc.GetIntervalMs()
		}
		hcfg, err := health.ConfigFromProto(hc)
		if err != nil {
			return nil, fmt.Errorf("healthCheck: %w", err)
		}
		if key.tls {
			hcfg.TLS = transportTLS(tr)
		} else if proto == "GRPC" || proto == "H2C" {
			hcfg.H2C = true
		}
		be.healthCfg = &hcfg
	}
	be.outlierCfg = health.OutlierConfigFromProto(cb)
	return be, nil
}
