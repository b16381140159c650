package snapshot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

var lbPolicies = map[v1alpha1.LBPolicy]pb.LBPolicy{
	"":                    pb.LBPolicy_LB_POLICY_ROUND_ROBIN,
	v1alpha1.LBRoundRobin: pb.LBPolicy_LB_POLICY_ROUND_ROBIN,
	v1alpha1.LBRandom:     pb.LBPolicy_LB_POLICY_RANDOM,
	v1alpha1.LBP2C:        pb.LBPolicy_LB_POLICY_P2C,
	v1alpha1.LBEWMA:       pb.LBPolicy_LB_POLICY_EWMA,
	v1alpha1.LBLeastConn:  pb.LBPolicy_LB_POLICY_LEAST_CONN,
	v1alpha1.LBRingHash:   pb.LBPolicy_LB_POLICY_RING_HASH,
	v1alpha1.LBMaglev:     pb.LBPolicy_LB_POLICY_MAGLEV,
}

// ms converts a duration to milliseconds, def when d is empty.
func ms(d v1alpha1.Duration, def time.Duration) uint32 {
	v := d.Std()
	if d == "" || v <= 0 {
		v = def
	}
	return uint32(min(v.Milliseconds(), int64(^uint32(0))))
}

func orU32(v int32, def uint32) uint32 {
	if v <= 0 {
		return def
	}
	return uint32(v)
}

func (b *builder) buildBackends() {
	for _, be := range sortByName(b.in.Backends, func(x *v1alpha1.ProxyBackend) (string, string) { return x.Namespace, x.Name }) {
		ns := orDefault(be.Namespace, "default")
		r := ref(kBackend, ns, be.Name)
		s := &be.Spec
		out := &pb.Backend{Name: key(ns, be.Name), Protocol: string(s.Protocol)}
		ok := true
		lb, known := lbPolicies[s.LBPolicy]
		if !known {
			b.errorf(r, "spec.lbPolicy", "unsupported value %q: use RoundRobin, Random, P2C, EWMA, LeastConn, RingHash or Maglev", s.LBPolicy)
			ok = false
		}
		out.LbPolicy = lb
		if h := s.HashPolicy; h != nil {
			if lb != pb.LBPolicy_LB_POLICY_RING_HASH && lb != pb.LBPolicy_LB_POLICY_MAGLEV {
				b.warnf(r, "spec.hashPolicy", "ignored: lbPolicy %s does not hash", s.LBPolicy)
			}
			out.HashPolicy = &pb.HashPolicy{Header: h.Header, SourceIp: h.SourceIP}
			if h.Cookie != nil {
				out.HashPolicy.Cookie = h.Cookie.Name
				out.HashPolicy.CookiePath = cmp.Or(h.Cookie.Path, "/")
				if h.Cookie.TTL != "" {
					out.HashPolicy.CookieTtlMs = ms(h.Cookie.TTL, 0)
				}
			}
		} else if lb == pb.LBPolicy_LB_POLICY_RING_HASH || lb == pb.LBPolicy_LB_POLICY_MAGLEV {
			out.HashPolicy = &pb.HashPolicy{SourceIp: true}
		}

		switch {
		case s.ServiceRef != nil && len(s.Endpoints) > 0:
			b.errorf(r, "spec", "set exactly one of serviceRef or endpoints")
			ok = false
		case s.ServiceRef != nil:
			eps, good := b.serviceEndpoints(r, ns, s.ServiceRef)
			ok = ok && good
			out.Endpoints = eps
		case len(s.Endpoints) > 0:
			eps, good := b.staticEndpoints(r, s.Endpoints)
			ok = ok && good
			out.Endpoints = eps
		default:
			b.errorf(r, "spec", "set serviceRef or endpoints")
			ok = false
		}

		if hc := s.HealthCheck; hc != nil {
			t := string(hc.Type)
			if t == "" {
				t = "TCP"
				if hc.HTTPPath != "" {
					t = "HTTP"
				}
			}
			out.HealthCheck = &pb.HealthCheck{
				Type:               t,
				IntervalMs:         ms(hc.Interval, 10*time.Second),
				TimeoutMs:          ms(hc.Timeout, 5*time.Second),
				HealthyThreshold:   orU32(hc.HealthyThreshold, 2),
				UnhealthyThreshold: orU32(hc.UnhealthyThreshold, 3),
				Host:               hc.Host,
				GrpcService:        hc.GRPCService,
				Port:               uint32(max(hc.Port, 0)),
			}
			if t == "HTTP" {
				out.HealthCheck.HttpPath = cmp.Or(hc.HTTPPath, "/")
			}
			for _, c := range hc.ExpectedStatuses {
				out.HealthCheck.ExpectedStatuses = append(out.HealthCheck.ExpectedStatuses, uint32(c))
			}
			slices.Sort(out.HealthCheck.ExpectedStatuses)
			if out.HealthCheck.TimeoutMs > out.HealthCheck.IntervalMs {
				b.warnf(r, "spec.healthCheck.timeout", "timeout %s is longer than interval %s; probes will overlap", hc.Timeout, cmp.Or(hc.Interval, "10s"))
			}
		}
		cb := s.CircuitBreaker
		if cb == nil {
			cb = &v1alpha1.CircuitBreaker{}
		}
		out.CircuitBreaker = &pb.CircuitBreaker{
			ConsecutiveFailures: orU32(cb.ConsecutiveFailures, 5),
			IntervalMs:          ms(cb.Interval, 10*time.Second),
			BaseEjectionTimeMs:  ms(cb.BaseEjectionTime, 30*time.Second),
			MaxEjectionPercent:  orU32(cb.MaxEjectionPercent, 50),
			MaxConnections:      orU32(cb.MaxConnections, 1024),
			MaxPendingRequests:  orU32(cb.MaxPendingRequests, 1024),
			MaxRequests:         orU32(cb.MaxRequests, 1024),
		}
		out.PanicThresholdPercent = 50
		if s.PanicThresholdPercent != nil {
			out.PanicThresholdPercent = uint32(max(*s.PanicThresholdPercent, 0))
		}
		var t v1alpha1.BackendTimeouts
		if s.Timeouts != nil {
			t = *s.Timeouts
		}
		out.ConnectTimeoutMs = ms(t.Connect, 5*time.Second)
		out.IdleTimeoutMs = ms(t.Idle, 90*time.Second)

		if tl := s.TLS; tl != nil {
			out.Tls = &pb.BackendTLS{ServerName: tl.ServerName, InsecureSkipVerify: tl.InsecureSkipVerify}
			if tl.CASecretRef != nil {
				name, good := b.caBundle(r, "spec.tls.caSecretRef", ns, tl.CASecretRef)
				ok = ok && good
				out.Tls.Ca = name
			}
			if tl.ClientCertSecretRef != nil {
				name, good := b.keyPair(r, "spec.tls.clientCertSecretRef", ns, tl.ClientCertSecretRef)
				ok = ok && good
				out.Tls.ClientCertificate = name
			}
		}
		if ok {
			b.backends[out.Name] = out
		}
	}
}

func (b *builder) staticEndpoints(r diag.Ref, in []v1alpha1.Endpoint) ([]*pb.Endpoint, bool) {
	ok := true
	seen := map[netip.AddrPort]int{}
	var out []*pb.Endpoint
	for i, ep := range in {
		a, err := netip.ParseAddr(ep.Address)
		if err != nil {
			b.errorf(r, fmt.Sprintf("spec.endpoints[%d].address", i), "invalid IP address %q", ep.Address)
			ok = false
			continue
		}
		if ep.Port < 1 || ep.Port > 65535 {
			b.errorf(r, fmt.Sprintf("spec.endpoints[%d].port", i), "port %d out of range 1-65535", ep.Port)
			ok = false
			continue
		}
		ap := netip.AddrPortFrom(a.Unmap(), uint16(ep.Port))
		if j, dup := seen[ap]; dup {
			b.errorf(r, fmt.Sprintf("spec.endpoints[%d]", i), "duplicate endpoint %s (also endpoints[%d])", ap, j)
			ok = false
			continue
		}
		seen[ap] = i
		w := uint32(1)
		if ep.Weight != nil {
			w = uint32(max(*ep.Weight, 0))
		}
		out = append(out, &pb.Endpoint{Address: ap.Addr().String(), Port: uint32(ap.Port()), Weight: w, State: b.endpointState(ap, true, false, w)})
	}
	sortEndpoints(out)
	return out, ok
}

// endpointState decides an endpoint's state once, for every node: ready
// comes from the EndpointSlice (always true for static endpoints), then the
// controller's probe verdicts can only take health away.
func (b *builder) endpointState(ap netip.AddrPort, ready, terminating bool, weight uint32) pb.EndpointState {
	switch {
	case terminating || weight == 0:
		return pb.EndpointState_ENDPOINT_STATE_DRAINING
	case !ready:
		return pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
	}
	if d := b.in.Decisions; d != nil {
		if healthy, probed := d.EndpointHealth[ap.String()]; probed && !healthy {
			return pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
		}
	}
	if b.opts.ProbeFailures[ap.String()] {
		return pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
	}
	return pb.EndpointState_ENDPOINT_STATE_HEALTHY
}

func (b *builder) serviceEndpoints(r diag.Ref, ns string, sr *v1alpha1.ServiceRef) ([]*pb.Endpoint, bool) {
	sns := orDefault(sr.Namespace, ns)
	if sns != ns {
		b.errorf(r, "spec.serviceRef.namespace", "cross-namespace Service references are not allowed (backend in %s, Service in %s)", ns, sns)
		return nil, false
	}
	e := b.services[key(sns, sr.Name)]
	if e == nil || e.svc == nil {
		b.missingf(r, "spec.serviceRef.name", "Service %s/%s not found", sns, sr.Name)
		return nil, !b.opts.ClusterComplete
	}
	var sp *corev1.ServicePort
	for i := range e.svc.Spec.Ports {
		if e.svc.Spec.Ports[i].Port == int32(sr.Port) {
			sp = &e.svc.Spec.Ports[i]
			break
		}
	}
	if sp == nil {
		b.errorf(r, "spec.serviceRef.port", "Service %s/%s has no port %d", sns, sr.Name, sr.Port)
		return nil, false
	}
	return b.sliceEndpoints(e, sp, ""), true
}

// sliceEndpoints returns the endpoints of a Service's port from its
// EndpointSlices, the target port resolved per slice by port name and
// protocol as kube-proxy does. A non-empty node keeps only the endpoints on
// that node (externalTrafficPolicy Local).
func (b *builder) sliceEndpoints(e *serviceEntry, sp *corev1.ServicePort, node string) []*pb.Endpoint {
	byAddr := map[netip.AddrPort]*pb.Endpoint{}
	var out []*pb.Endpoint
	for _, es := range e.slices {
		var port int32 = -1
		for _, p := range es.Ports {
			if ptrOr(p.Name, "") == sp.Name && ptrOr(p.Protocol, corev1.ProtocolTCP) == cmp.Or(sp.Protocol, corev1.ProtocolTCP) && p.Port != nil {
				port = *p.Port
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, ep := range es.Endpoints {
			if node != "" && ptrOr(ep.NodeName, "") != node {
				continue
			}
			c := ep.Conditions
			ready := ptrOr(c.Ready, true)
			terminating := ptrOr(c.Terminating, false)
			if terminating && !ptrOr(c.Serving, ready) {
				// Terminating and no longer serving: existing flows have
				// nowhere to go, drop the endpoint.
				continue
			}
			for _, as := range ep.Addresses {
				a, err := netip.ParseAddr(as)
				if err != nil {
					continue
				}
				ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
				if byAddr[ap] != nil {
					continue // the same endpoint in two slices during a move
				}
				pe := &pb.Endpoint{
					Address: ap.Addr().String(), Port: uint32(port), Weight: 1,
					State: b.endpointState(ap, ready, terminating, 1),
					Node:  ptrOr(ep.NodeName, ""), Zone: ptrOr(ep.Zone, ""),
				}
				byAddr[ap] = pe
				out = append(out, pe)
			}
		}
	}
	sortEndpoints(out)
	return out
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// sortEndpoints orders endpoints by address then port: the stable key every
// node hashes, never a list index.
func sortEndpoints(eps []*pb.Endpoint) {
	slices.SortFunc(eps, func(x, y *pb.Endpoint) int {
		ax, _ := netip.ParseAddr(x.Address)
		ay, _ := netip.ParseAddr(y.Address)
		return cmp.Or(ax.Compare(ay), cmp.Compare(x.Port, y.Port))
	})
}
