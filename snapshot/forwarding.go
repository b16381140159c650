package snapshot

import (
	"cmp"
	"net/netip"
	"strconv"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

var forwardingModes = map[v1alpha1.ForwardingMode]pb.ForwardingMode{
	v1alpha1.ForwardingModeNAT: pb.ForwardingMode_FORWARDING_MODE_NAT,
	v1alpha1.ForwardingModeDSR: pb.ForwardingMode_FORWARDING_MODE_DSR,
}

var encapsulations = map[v1alpha1.Encapsulation]pb.Encapsulation{
	v1alpha1.EncapsulationIPIP: pb.Encapsulation_ENCAPSULATION_IPIP,
	v1alpha1.EncapsulationGUE:  pb.Encapsulation_ENCAPSULATION_GUE,
	v1alpha1.EncapsulationL2:   pb.Encapsulation_ENCAPSULATION_L2,
}

// resolveForwarding fills in the defaults of a checked forwarding choice:
// nil is NAT with SNAT, DSR without encapsulation is IPIP, GUE without a
// port uses DefaultGUEPort. Settings that do not apply to the mode are
// dropped, so the result says exactly what the fast path does.
func resolveForwarding(c *v1alpha1.ForwardingConfig) *pb.Forwarding {
	if c == nil || c.Mode != v1alpha1.ForwardingModeDSR {
		return &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT, PreserveClientIp: c != nil && c.PreserveClientIP}
	}
	f := &pb.Forwarding{
		Mode:          pb.ForwardingMode_FORWARDING_MODE_DSR,
		Encapsulation: encapsulations[cmp.Or(c.Encapsulation, v1alpha1.EncapsulationIPIP)],
	}
	if f.Encapsulation == pb.Encapsulation_ENCAPSULATION_GUE {
		f.GuePort = uint32(cmp.Or(c.GUEPort, v1alpha1.DefaultGUEPort))
	}
	return f
}

// checkForwarding checks spec.forwarding of a VIP as the CRD's rules do (the
// builder must not trust its input): what the apiserver would reject is an
// error here too, and the VIP is not served.
func (b *builder) checkForwarding(e *vipEntry) {
	c := e.obj.Spec.Forwarding
	if c == nil {
		return
	}
	bad := func(field, format string, args ...any) {
		b.errorf(e.ref, "spec.forwarding."+field, format, args...)
		e.accepted = false
	}
	_, modeOK := forwardingModes[c.Mode]
	if !modeOK && c.Mode != "" {
		bad("mode", "unsupported mode %q: use NAT or DSR", c.Mode)
	}
	if c.Encapsulation != "" {
		if _, ok := encapsulations[c.Encapsulation]; !ok {
			bad("encapsulation", "unsupported encapsulation %q: use IPIP, GUE or L2", c.Encapsulation)
		}
	}
	if c.GUEPort < 0 || c.GUEPort > 65535 {
		bad("guePort", "guePort must be 1-65535; leave it out for the default %d", v1alpha1.DefaultGUEPort)
	}
	if !modeOK && c.Mode != "" {
		// Which settings apply depends on the mode; with none known, saying
		// they do not apply would be noise.
		return
	}
	dsr := c.Mode == v1alpha1.ForwardingModeDSR
	if c.PreserveClientIP && dsr {
		bad("preserveClientIP", "preserveClientIP applies only to mode NAT (DSR always keeps the client address): remove preserveClientIP or set mode NAT")
	}
	if c.Encapsulation != "" && !dsr {
		bad("encapsulation", "encapsulation applies only to mode DSR: set mode DSR or remove encapsulation")
	}
	switch {
	case c.GUEPort == 0:
	case !dsr:
		bad("guePort", "guePort applies only to mode DSR with encapsulation GUE: set mode DSR and encapsulation GUE, or remove guePort")
	case c.Encapsulation != v1alpha1.EncapsulationGUE:
		bad("guePort", "guePort applies only to encapsulation GUE (DSR defaults to IPIP): set encapsulation GUE or remove guePort")
	}
}

// checkDSRPorts warns about endpoints a DSR listener cannot reach as
// configured: DSR delivers the client's packet unchanged, so it arrives on
// the listener's port whatever port the endpoint names.
func (b *builder) checkDSRPorts(l *listenerEntry, rt *pb.Route, v *vipEntry) {
	field, owner := "spec.forwarding", v.ref
	if v.svc != nil {
		// Services choose DSR by annotation; each port is its own Service's.
		field, owner = annotationField(v1alpha1.AnnotationForwardingMode), l.gw.ref
	}
	for _, wb := range rt.Rules[0].Backends {
		be := b.backends[wb.Backend]
		if be == nil {
			continue
		}
		for _, ep := range be.Endpoints {
			if ep.Port == l.pb.Port {
				continue
			}
			a, _ := netip.ParseAddr(ep.Address)
			b.warnf(owner, field, "listener %s: endpoint %s of backend %s has port %d, but DSR cannot rewrite ports: packets reach the backend on the listener's port %d, so it must listen there too (or use mode NAT)",
				l.pb.Name, netip.AddrPortFrom(a, uint16(ep.Port)), wb.Backend, ep.Port, l.pb.Port)
		}
	}
}

// forwardingAnnotations are the Service annotations that choose forwarding.
var forwardingAnnotations = []string{
	v1alpha1.AnnotationForwardingMode,
	v1alpha1.AnnotationDSREncapsulation,
	v1alpha1.AnnotationPreserveClientIP,
	v1alpha1.AnnotationGUEPort,
}

// addressAnnotations are the Service annotations that choose the address.
var addressAnnotations = []string{
	v1alpha1.AnnotationAddressPool,
	v1alpha1.AnnotationLoadBalancerIPs,
	v1alpha1.AnnotationAllowSharedIP,
}

// checkServiceAnnotations reports NovaEdge annotations on Services that
// NovaEdge does not serve: Services of another type, and Services of type
// LoadBalancer left to another implementation by their class. Saying so
// keeps users from mistaking silence for support. The annotations of the
// Services it serves are read where they are translated (services.go).
func (b *builder) checkServiceAnnotations() {
	for _, s := range sortByName(b.in.Services, func(s *corev1.Service) (string, string) { return s.Namespace, s.Name }) {
		if b.servesService(s) {
			continue
		}
		r := ref(kService, orDefault(s.Namespace, "default"), s.Name)
		for _, group := range []struct {
			what string
			keys []string
		}{{"forwarding", forwardingAnnotations}, {"address", addressAnnotations}} {
			for _, k := range group.keys {
				if _, ok := s.Annotations[k]; !ok {
					continue
				}
				if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
					b.warnf(r, annotationField(k), "ignored: %s annotations apply only to Services of type LoadBalancer, and this one is of type %s", group.what, cmp.Or(s.Spec.Type, corev1.ServiceTypeClusterIP))
					continue
				}
				b.warnf(r, annotationField(k), "ignored: %s", b.notServedWhy(s))
			}
		}
	}
}

func annotationField(k string) string { return "metadata.annotations[" + k + "]" }

// serviceForwarding resolves the forwarding of a Service of type
// LoadBalancer from its annotations. A Service cannot be rejected over an
// annotation as a ProxyVIP is over its spec (nothing checked it on the way
// in), so a bad or inapplicable value is a warning and its default is used.
func (b *builder) serviceForwarding(r diag.Ref, s *corev1.Service) *pb.Forwarding {
	warn := func(k, format string, args ...any) { b.warnf(r, annotationField(k), format, args...) }
	ann := s.Annotations
	var c v1alpha1.ForwardingConfig
	if v, ok := ann[v1alpha1.AnnotationForwardingMode]; ok {
		if _, valid := forwardingModes[v1alpha1.ForwardingMode(v)]; valid {
			c.Mode = v1alpha1.ForwardingMode(v)
		} else {
			warn(v1alpha1.AnnotationForwardingMode, "invalid value %q: use NAT or DSR; NAT is used", v)
		}
	}
	dsr := c.Mode == v1alpha1.ForwardingModeDSR
	if v, ok := ann[v1alpha1.AnnotationPreserveClientIP]; ok {
		switch {
		case v != "true" && v != "false":
			warn(v1alpha1.AnnotationPreserveClientIP, `invalid value %q: use "true" or "false"; false (SNAT to the node's address) is used`, v)
		case dsr && v == "true":
			warn(v1alpha1.AnnotationPreserveClientIP, "ignored: it applies only to forwarding mode NAT (DSR always keeps the client address)")
		default:
			c.PreserveClientIP = v == "true"
		}
	}
	if v, ok := ann[v1alpha1.AnnotationDSREncapsulation]; ok {
		_, valid := encapsulations[v1alpha1.Encapsulation(v)]
		switch {
		case !dsr:
			warn(v1alpha1.AnnotationDSREncapsulation, "ignored (value %q): it applies only to forwarding mode DSR; set %s to DSR", v, v1alpha1.AnnotationForwardingMode)
		case !valid:
			warn(v1alpha1.AnnotationDSREncapsulation, "invalid value %q: use IPIP, GUE or L2; IPIP is used", v)
		default:
			c.Encapsulation = v1alpha1.Encapsulation(v)
		}
	}
	if v, ok := ann[v1alpha1.AnnotationGUEPort]; ok {
		p, err := strconv.ParseUint(v, 10, 16)
		switch {
		case !dsr || c.Encapsulation != v1alpha1.EncapsulationGUE:
			warn(v1alpha1.AnnotationGUEPort, "ignored (value %q): it applies only to forwarding mode DSR with %s GUE", v, v1alpha1.AnnotationDSREncapsulation)
		case err != nil || p == 0:
			warn(v1alpha1.AnnotationGUEPort, "invalid value %q: use a port 1-65535; %d is used", v, v1alpha1.DefaultGUEPort)
		default:
			c.GUEPort = int32(p)
		}
	}
	return resolveForwarding(&c)
}

// cloneForwarding gives every plan entry its own copy, so no two messages
// of the snapshot share one (a caller changing one would change both).
func cloneForwarding(f *pb.Forwarding) *pb.Forwarding {
	if f == nil {
		return nil
	}
	return proto.Clone(f).(*pb.Forwarding)
}
