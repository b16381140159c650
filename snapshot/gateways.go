package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

type gatewayEntry struct {
	obj       *v1alpha1.ProxyGateway
	ns        string
	ref       diag.Ref
	vip       *vipEntry
	listeners []*listenerEntry
}

type listenerEntry struct {
	gw    *gatewayEntry
	spec  *v1alpha1.Listener
	field string // "spec.listeners[i]"
	pb    *pb.Listener
	// l4 is the route serving a TCP or UDP listener (only one may).
	l4 *pb.Route
	// tls holds the TLS-passthrough routes attached, for the plan.
	tlsRoutes []*pb.Route
	// hostnames claimed by TLS-passthrough routes, to reject duplicates.
	sni map[string]string
	// routes is the set of names in pb.Routes (see attach).
	routes map[string]bool
}

var protocols = map[v1alpha1.ListenerProtocol]pb.Protocol{
	v1alpha1.ProtocolHTTP:  pb.Protocol_PROTOCOL_HTTP,
	v1alpha1.ProtocolHTTPS: pb.Protocol_PROTOCOL_HTTPS,
	v1alpha1.ProtocolTLS:   pb.Protocol_PROTOCOL_TLS,
	v1alpha1.ProtocolTCP:   pb.Protocol_PROTOCOL_TCP,
	v1alpha1.ProtocolUDP:   pb.Protocol_PROTOCOL_UDP,
	v1alpha1.ProtocolHTTP3: pb.Protocol_PROTOCOL_HTTP3,
}

func (l *listenerEntry) passthrough() bool {
	return l.spec.Protocol == v1alpha1.ProtocolTLS && l.spec.TLS != nil && l.spec.TLS.Mode == v1alpha1.TLSModePassthrough
}

// routeKind is the kind of route a listener takes.
func (l *listenerEntry) routeKind() pb.RouteKind {
	switch l.spec.Protocol {
	case v1alpha1.ProtocolHTTP, v1alpha1.ProtocolHTTPS, v1alpha1.ProtocolHTTP3:
		return pb.RouteKind_ROUTE_KIND_HTTP
	case v1alpha1.ProtocolTLS:
		if l.passthrough() {
			return pb.RouteKind_ROUTE_KIND_TLS
		}
		return pb.RouteKind_ROUTE_KIND_TCP
	case v1alpha1.ProtocolUDP:
		return pb.RouteKind_ROUTE_KIND_UDP
	default:
		return pb.RouteKind_ROUTE_KIND_TCP
	}
}

// transport is "udp" for listeners on UDP sockets, else "tcp".
func transport(p v1alpha1.ListenerProtocol) string {
	if p == v1alpha1.ProtocolUDP || p == v1alpha1.ProtocolHTTP3 {
		return "udp"
	}
	return "tcp"
}

func (b *builder) buildGateways() {
	gws := oldestFirst(b.in.Gateways, func(g *v1alpha1.ProxyGateway) (*metav1.ObjectMeta, bool) {
		return &g.ObjectMeta, wasAccepted(g.Status.Conditions)
	})
	// binds records who holds each address:port/transport ("*" for every
	// address), so two listeners never fight over one socket.
	binds := map[string]*listenerEntry{}
	for _, g := range gws {
		ns := orDefault(g.Namespace, "default")
		e := &gatewayEntry{obj: g, ns: ns, ref: ref(kGateway, ns, g.Name)}
		// A gateway that cannot be served is still checked to the end, so
		// one run reports every problem it has.
		serve := true
		if g.Spec.VIPRef != "" {
			v := b.vipsByName[g.Spec.VIPRef]
			switch {
			case v != nil:
				e.vip = v
			case slices.ContainsFunc(b.vips, func(x *vipEntry) bool { return x.obj.Name == g.Spec.VIPRef }):
				b.errorf(e.ref, "spec.vipRef", "ProxyVIP %q is not usable (see its errors); gateway not served", g.Spec.VIPRef)
				serve = false
			default:
				b.errorf(e.ref, "spec.vipRef", "ProxyVIP %q not found; gateway not served", g.Spec.VIPRef)
				serve = false
			}
		}
		policies, ok := b.resolvePolicies(e.ref, "spec.policyRefs", ns, g.Spec.PolicyRefs)
		if !ok {
			// Serving without a policy the user asked for (auth, IP filter)
			// would open what they meant to close: fail closed.
			serve = false
		}
		var comp *pb.Compression
		if c := g.Spec.Compression; c != nil && c.Enabled {
			comp = &pb.Compression{MinSize: uint64(cmp.Or(c.MinSize, 1024))}
			for _, a := range c.Algorithms {
				comp.Algorithms = append(comp.Algorithms, string(a))
			}
			if len(comp.Algorithms) == 0 {
				comp.Algorithms = []string{"gzip"}
			}
			comp.ContentTypes = c.ContentTypes
			if len(comp.ContentTypes) == 0 {
				comp.ContentTypes = []string{"text/", "application/json", "application/javascript", "application/xml", "image/svg+xml"}
			}
		}
		seen := map[string]int{}
		for i := range g.Spec.Listeners {
			ls := &g.Spec.Listeners[i]
			field := fmt.Sprintf("spec.listeners[%d]", i)
			if j, dup := seen[ls.Name]; dup {
				b.errorf(e.ref, field+".name", "duplicate listener name %q (also spec.listeners[%d])", ls.Name, j)
				continue
			}
			seen[ls.Name] = i
			l := b.buildListener(e, ls, field, policies, comp)
			if l == nil || !serve {
				continue
			}
			if !b.claimBinds(binds, l) {
				continue
			}
			e.listeners = append(e.listeners, l)
			b.listeners = append(b.listeners, l)
		}
		if serve {
			b.gateways = append(b.gateways, e)
		}
	}
}

func (b *builder) buildListener(g *gatewayEntry, ls *v1alpha1.Listener, field string, policies []string, comp *pb.Compression) *listenerEntry {
	proto, known := protocols[ls.Protocol]
	if !known {
		b.errorf(g.ref, field+".protocol", "unsupported protocol %q: use HTTP, HTTPS, TLS, TCP, UDP or HTTP3", ls.Protocol)
		return nil
	}
	if ls.Port < 1 || ls.Port > 65535 {
		b.errorf(g.ref, field+".port", "port %d out of range 1-65535", ls.Port)
		return nil
	}
	l := &listenerEntry{gw: g, spec: ls, field: field, sni: map[string]string{}}
	l.pb = &pb.Listener{
		Name:      key(g.ns, g.obj.Name) + "/" + ls.Name,
		Gateway:   key(g.ns, g.obj.Name),
		Port:      uint32(ls.Port),
		Protocol:  proto,
		Hostnames: slices.Sorted(slices.Values(ls.Hostnames)),
		Policies:  policies,
	}
	if g.vip != nil {
		l.pb.Vip = g.vip.obj.Name
		l.pb.Addresses = slices.Clone(g.vip.pb.Addresses)
		if ports := g.vip.pb.Ports; len(ports) > 0 && !slices.Contains(ports, uint32(ls.Port)) {
			b.errorf(g.ref, field+".port", "port %d is not among the ports of ProxyVIP %s %v", ls.Port, g.vip.obj.Name, ports)
			return nil
		}
	}
	if l.routeKind() == pb.RouteKind_ROUTE_KIND_HTTP {
		l.pb.Compression = comp
	}
	needsTLS := ls.Protocol == v1alpha1.ProtocolHTTPS || ls.Protocol == v1alpha1.ProtocolHTTP3 || ls.Protocol == v1alpha1.ProtocolTLS
	switch {
	case needsTLS && ls.TLS == nil:
		b.errorf(g.ref, field+".tls", "required for protocol %s", ls.Protocol)
		return nil
	case !needsTLS && ls.TLS != nil:
		b.errorf(g.ref, field+".tls", "not allowed for protocol %s", ls.Protocol)
		return nil
	case ls.TLS != nil:
		t := ls.TLS
		l.pb.Tls = &pb.ListenerTLS{
			Passthrough:  t.Mode == v1alpha1.TLSModePassthrough,
			MinVersion:   string(cmp.Or(t.MinVersion, "TLS1.2")),
			MaxVersion:   string(cmp.Or(t.MaxVersion, "TLS1.3")),
			CipherSuites: t.CipherSuites,
			SslRedirect:  t.SSLRedirect,
		}
		if l.pb.Tls.Passthrough {
			if ls.Protocol != v1alpha1.ProtocolTLS {
				b.errorf(g.ref, field+".tls.mode", "Passthrough needs protocol TLS; %s terminates TLS", ls.Protocol)
				return nil
			}
			if t.SecretRef != nil || len(t.CertificateRefs) > 0 {
				b.warnf(g.ref, field+".tls", "certificates are ignored on a Passthrough listener")
			}
		} else {
			refs := t.CertificateRefs
			if t.SecretRef != nil {
				refs = append([]v1alpha1.SecretRef{*t.SecretRef}, refs...)
			}
			if len(refs) == 0 {
				b.errorf(g.ref, field+".tls", "TLS termination needs secretRef or certificateRefs")
				return nil
			}
			for i, r := range refs {
				f := field + ".tls.secretRef"
				if t.SecretRef == nil || i > 0 {
					f = fmt.Sprintf("%s.tls.certificateRefs[%d]", field, i-btoi(t.SecretRef != nil))
				}
				name, ok := b.keyPair(g.ref, f, g.ns, &r)
				if !ok {
					return nil // not servable without its certificates
				}
				l.pb.Tls.Certificates = append(l.pb.Tls.Certificates, name)
			}
			if ca := t.ClientAuth; ca != nil && ca.Mode != v1alpha1.ClientAuthNone {
				l.pb.Tls.ClientAuth = "REQUIRE"
				if ca.Mode == v1alpha1.ClientAuthRequest {
					l.pb.Tls.ClientAuth = "REQUEST"
				}
				if ca.CASecretRef == nil {
					b.errorf(g.ref, field+".tls.clientAuth.caSecretRef", "required unless mode is None")
					return nil
				}
				name, ok := b.caBundle(g.ref, field+".tls.clientAuth.caSecretRef", g.ns, ca.CASecretRef)
				if !ok {
					return nil
				}
				l.pb.Tls.ClientCa = name
			}
		}
	}
	if rs := ls.RedirectScheme; rs != nil && rs.Enabled {
		if ls.Protocol != v1alpha1.ProtocolHTTP && ls.Protocol != v1alpha1.ProtocolHTTPS {
			b.errorf(g.ref, field+".redirectScheme", "applies to HTTP and HTTPS listeners only")
			return nil
		}
		l.pb.RedirectScheme = &pb.RedirectScheme{Scheme: cmp.Or(rs.Scheme, "https"), StatusCode: uint32(cmp.Or(rs.StatusCode, 301)), Port: uint32(max(rs.Port, 0))}
	}
	if len(ls.Hostnames) > 0 && (ls.Protocol == v1alpha1.ProtocolTCP || ls.Protocol == v1alpha1.ProtocolUDP) {
		b.errorf(g.ref, field+".hostnames", "hostnames cannot be matched on %s listeners", ls.Protocol)
		return nil
	}
	return l
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// claimBinds reserves the listener's sockets; a listener whose address and
// port another listener already holds is rejected (the older gateway keeps
// it), because the kernel would refuse the second bind anyway.
func (b *builder) claimBinds(binds map[string]*listenerEntry, l *listenerEntry) bool {
	tr := transport(l.spec.Protocol)
	addrs := l.pb.Addresses
	if len(addrs) == 0 {
		addrs = []string{"*"}
	}
	conflict := func(k string) *listenerEntry { return binds[k] }
	for _, a := range addrs {
		candidates := []string{fmt.Sprintf("%s|%d|%s", a, l.spec.Port, tr)}
		if a == "*" {
			// A wildcard bind conflicts with every specific bind.
			for _, o := range b.listeners {
				if transport(o.spec.Protocol) == tr && o.spec.Port == l.spec.Port {
					candidates = append(candidates, fmt.Sprintf("%s|%d|%s", firstOr(o.pb.Addresses, "*"), o.spec.Port, tr))
				}
			}
		} else {
			candidates = append(candidates, fmt.Sprintf("*|%d|%s", l.spec.Port, tr))
		}
		for _, k := range candidates {
			if o := conflict(k); o != nil {
				where := "every address"
				if a != "*" {
					where = a
				}
				b.errorf(l.gw.ref, l.field+".port", "%s port %d on %s is already used by listener %s; the older gateway keeps it", tr, l.spec.Port, where, o.pb.Name)
				return false
			}
		}
	}
	for _, a := range addrs {
		binds[fmt.Sprintf("%s|%d|%s", a, l.spec.Port, tr)] = l
	}
	return true
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// resolvePolicies looks up policyRefs in ns. ok is false if any is missing.
func (b *builder) resolvePolicies(owner diag.Ref, field, ns string, refs []v1alpha1.LocalObjectRef) ([]string, bool) {
	var out []string
	ok := true
	for i, r := range refs {
		name := key(ns, r.Name)
		if b.policies[name] == nil {
			if slices.ContainsFunc(b.in.Policies, func(p v1alpha1.ProxyPolicy) bool {
				return p.Name == r.Name && orDefault(p.Namespace, "default") == ns
			}) {
				b.errorf(owner, fmt.Sprintf("%s[%d].name", field, i), "ProxyPolicy %s is not usable (see its errors); not served without it", name)
			} else {
				b.errorf(owner, fmt.Sprintf("%s[%d].name", field, i), "ProxyPolicy %s not found; not served without it", name)
			}
			ok = false
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, ok
}

// hostnamesIntersect reports whether a route's hostnames and a listener's
// share a name, as Gateway API defines it (empty means any; "*.a.b" matches
// one or more labels in front of a.b).
func hostnamesIntersect(route, listener []string) bool {
	if len(route) == 0 || len(listener) == 0 {
		return true
	}
	for _, r := range route {
		for _, l := range listener {
			if hostMatch(r, l) || hostMatch(l, r) {
				return true
			}
		}
	}
	return false
}

// hostMatch reports whether pattern (exact or "*.suffix") covers name.
func hostMatch(pattern, name string) bool {
	if pattern == name {
		return true
	}
	if len(pattern) > 2 && pattern[:2] == "*." {
		suffix := pattern[1:] // ".suffix"
		if len(name) > len(suffix) && name[len(name)-len(suffix):] == suffix {
			return true
		}
	}
	return false
}
