package snapshot

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Services of type LoadBalancer (the MetalLB replacement) are translated
// here into the kinds the rest of the build already handles: one VIP per
// Service, or per sharing key; an L4 listener per TCP or UDP port, bound on
// the VIP's addresses; a route and a backend per port, the backend fed by
// the Service's EndpointSlices. A TCP or UDP listener with one route and only
// backends is what the plan puts on the XDP fast path, so Services are
// balanced in the kernel.
//
// The VIP is announced with L2ARP. BGP and OSPF need peers, areas and
// authentication, which only a ProxyVIP's spec can carry: a Service that
// needs them is served by a ProxyVIP and a ProxyGateway instead.

const kService = "Service"

// ServiceVIPName is the name of the VIP of the Service namespace/name when
// it shares its address with no other. Kubernetes names hold no "/", so it
// never collides with a ProxyVIP's name.
func ServiceVIPName(namespace, name string) string {
	return "Service/" + namespace + "/" + name
}

// SharedVIPName is the name of the VIP of the Services that share one
// address under the novaedge.io/allow-shared-ip key. Namespaces hold no
// ":", so it never collides with ServiceVIPName.
func SharedVIPName(key string) string { return "Service/shared:" + key }

// ServicePort is a port a Service is served on.
type ServicePort struct {
	Port uint16
	// Protocol is TCP or UDP.
	Protocol corev1.Protocol
}

// ServiceInfo is what a build decides about one Service of type
// LoadBalancer that NovaEdge serves, from the resources alone (no
// decisions). The controller's IPAM, scheduler and status writer use it so
// that they and the builder agree on which Services are served and how.
type ServiceInfo struct {
	Namespace, Name string
	// Created orders claims: the older Service keeps a contested address.
	Created metav1.Time
	// VIP is the name under which Decisions hold the Service's addresses and
	// assignment: ServiceVIPName, or SharedVIPName when it shares.
	VIP string
	// Pool is the ProxyIPPool asked for (novaedge.io/address-pool); empty
	// means any pool with autoAssign. For a shared address, the pool every
	// sharer asks for.
	Pool string
	// Requested are the addresses asked for (novaedge.io/loadBalancerIPs,
	// else spec.loadBalancerIP), IPv4 first; for a shared address, those of
	// the oldest sharer that asks. Empty: any address of the pool.
	Requested []netip.Addr
	// RequestField names where Requested came from, for messages.
	RequestField string
	// Families are the address families wanted: 4 and/or 6, IPv4 first
	// (spec.ipFamilies; else those of Requested, else of Current; else 4).
	Families []int
	// SharingKey is the novaedge.io/allow-shared-ip key; empty when the
	// Service shares its address with no other.
	SharingKey string
	// LocalTraffic is externalTrafficPolicy Local: only nodes with a ready
	// endpoint of the Service (EndpointNodes) may serve it, and the client's
	// address is kept.
	LocalTraffic bool
	// Ports served, in spec order (SCTP and invalid ports left out).
	Ports []ServicePort
	// EndpointNodes are the nodes hosting a ready, not terminating endpoint
	// of the Service, sorted: the nodes eligible for LocalTraffic.
	EndpointNodes []string
	// Current are the addresses status.loadBalancer.ingress holds.
	Current []netip.Addr
	// Problem, when not empty, says why the build leaves the Service out
	// whatever the decisions (bad annotation, pool not found, conflict with
	// an older Service sharing its key). The IPAM needs no address for it,
	// and its status gets none; a shared VIP still serves the other sharers.
	Problem string
}

// ServedServices returns every Service of in that NovaEdge serves (type
// LoadBalancer, and class v1alpha1.LoadBalancerClass, or no class unless
// opts.SkipClasslessServices), sorted by namespace and name, with the
// decisions a build makes about it. Only opts.SkipClasslessServices matters.
func ServedServices(in *Input, opts Options) []ServiceInfo {
	b := newBuilder(in, opts)
	b.indexCore()
	b.buildPools()
	entries, groups := b.selectServices()
	byName := map[string]*svcGroup{}
	for _, g := range groups {
		byName[g.name] = g
	}
	slices.SortFunc(entries, func(x, y *svcEntry) int {
		return cmp.Or(cmp.Compare(x.ns, y.ns), cmp.Compare(x.svc.Name, y.svc.Name))
	})
	out := make([]ServiceInfo, 0, len(entries))
	for _, e := range entries {
		info := ServiceInfo{
			Namespace: e.ns, Name: e.svc.Name, Created: e.svc.CreationTimestamp,
			VIP: e.vip, Pool: e.poolName, Requested: slices.Clone(e.requested), RequestField: e.requestField,
			Families: slices.Clone(e.families), SharingKey: e.key, LocalTraffic: e.local,
			EndpointNodes: b.endpointNodes(e), Current: slices.Clone(e.current), Problem: e.problem,
		}
		if g := byName[e.vip]; g != nil && e.problem == "" {
			info.Pool, info.Requested, info.RequestField = g.poolName, slices.Clone(g.requested), g.requestField
		}
		for _, p := range e.ports {
			info.Ports = append(info.Ports, ServicePort{Port: uint16(p.sp.Port), Protocol: cmp.Or(p.sp.Protocol, corev1.ProtocolTCP)})
		}
		out = append(out, info)
	}
	return out
}

// svcEntry is one Service NovaEdge serves, as parsed.
type svcEntry struct {
	svc *corev1.Service
	ns  string
	ref diag.Ref
	// vip is the name of its VIP; key the sharing key.
	vip, key     string
	poolName     string
	requested    []netip.Addr
	requestField string
	families     []int
	local        bool
	fwd          *pb.Forwarding
	affinity     pb.Affinity
	affinityTTL  uint32
	ports        []svcPort
	current      []netip.Addr
	// problem is the first error that keeps the Service out.
	problem string
}

type svcPort struct {
	field string // "spec.ports[i]"
	sp    *corev1.ServicePort
	proto v1alpha1.ListenerProtocol
}

// svcGroup is the Services behind one VIP: one, or those sharing a key.
type svcGroup struct {
	name, key string
	// members are oldest first; the first decides what the others must
	// agree with.
	members      []*svcEntry
	poolName     string
	requested    []netip.Addr
	requestField string
	ports        map[string]*svcEntry // "53/UDP" → the Service serving it
}

func (g *svcGroup) first() *svcEntry { return g.members[0] }

// describe names the owner of a VIP in messages.
func (v *vipEntry) describe() string {
	switch {
	case v.svc == nil:
		return "ProxyVIP " + v.obj.Name
	case v.svc.key != "":
		return fmt.Sprintf("the Services sharing key %q", v.svc.key)
	default:
		m := v.svc.first()
		return "Service " + key(m.ns, m.svc.Name)
	}
}

// servesService reports whether NovaEdge serves s: type LoadBalancer, and
// our class, or no class while classless Services are ours.
func (b *builder) servesService(s *corev1.Service) bool {
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := ptrOr(s.Spec.LoadBalancerClass, ""); c != "" {
		return c == v1alpha1.LoadBalancerClass
	}
	return !b.opts.SkipClasslessServices
}

// notServedWhy says why a Service of type LoadBalancer is not served.
func (b *builder) notServedWhy(s *corev1.Service) string {
	if c := ptrOr(s.Spec.LoadBalancerClass, ""); c != "" {
		return fmt.Sprintf("spec.loadBalancerClass is %q, so another load balancer serves this Service (NovaEdge serves class %q)", c, v1alpha1.LoadBalancerClass)
	}
	return fmt.Sprintf("the Service has no spec.loadBalancerClass, and classless Services are left to another load balancer (controller flag --default-lb-class=false); set loadBalancerClass %q to have NovaEdge serve it", v1alpha1.LoadBalancerClass)
}

// fail reports an error that keeps e out.
func (b *builder) fail(e *svcEntry, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.errorf(e.ref, field, "%s", msg)
	if e.problem == "" {
		e.problem = field + ": " + msg
	}
}

// selectServices parses the Services NovaEdge serves, oldest first, and
// groups them by VIP. Services with problems are in entries but in no
// group.
func (b *builder) selectServices() (entries []*svcEntry, groups []*svcGroup) {
	// A Service holds its address when its status lists one.
	svcs := oldestFirst(b.in.Services, func(s *corev1.Service) (*metav1.ObjectMeta, bool) {
		return &s.ObjectMeta, len(s.Status.LoadBalancer.Ingress) > 0
	})
	byName := map[string]*svcGroup{}
	for _, s := range svcs {
		if !b.servesService(s) {
			continue
		}
		e := b.parseService(s)
		entries = append(entries, e)
		if e.problem != "" {
			continue
		}
		g := byName[e.vip]
		if g == nil {
			g = &svcGroup{name: e.vip, key: e.key, poolName: e.poolName, ports: map[string]*svcEntry{}}
			byName[e.vip] = g
			groups = append(groups, g)
		} else if !b.canShare(g, e) {
			continue
		}
		g.members = append(g.members, e)
		if len(g.requested) == 0 && len(e.requested) > 0 {
			g.requested, g.requestField = e.requested, e.requestField
		}
		for _, p := range e.ports {
			g.ports[portKey(p)] = e
		}
	}
	return entries, groups
}

func portKey(p svcPort) string { return fmt.Sprintf("%d/%s", p.sp.Port, p.proto) }

// parseService reads what NovaEdge needs of one Service, reporting every
// problem.
func (b *builder) parseService(s *corev1.Service) *svcEntry {
	ns := orDefault(s.Namespace, "default")
	e := &svcEntry{svc: s, ns: ns, ref: ref(kService, ns, s.Name)}
	ann := s.Annotations

	if len(s.Spec.LoadBalancerSourceRanges) > 0 {
		// Serving the Service to every client would open what the ranges
		// are meant to close: fail closed.
		b.fail(e, "spec.loadBalancerSourceRanges", "not supported yet: NovaEdge cannot limit which clients reach a Service, so it is not served rather than opened to every source")
	}

	for i, ing := range s.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // a hostname: not ours to serve
		}
		a, err := netip.ParseAddr(ing.IP)
		if err != nil {
			b.warnf(e.ref, fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), "invalid IP address %q; ignored", ing.IP)
			continue
		}
		e.current = append(e.current, a.Unmap())
	}
	b.parseRequested(e)
	b.parseFamilies(e)

	if v, ok := ann[v1alpha1.AnnotationAddressPool]; ok {
		f := annotationField(v1alpha1.AnnotationAddressPool)
		e.poolName = v
		switch p := b.poolsByName[v]; {
		case v == "":
			b.fail(e, f, "empty pool name: name a ProxyIPPool, or remove the annotation to use any pool with autoAssign")
		case p == nil:
			b.fail(e, f, "ProxyIPPool %q not found", v)
		case !p.accepted:
			b.fail(e, f, "ProxyIPPool %q is not usable (see its errors)", v)
		default:
			for _, a := range e.requested {
				if !p.pool.Contains(a) {
					b.fail(e, e.requestField, "address %s is outside ProxyIPPool %s", a, v)
				}
			}
		}
	}

	seen := map[string]string{}
	for i := range s.Spec.Ports {
		sp := &s.Spec.Ports[i]
		p := svcPort{field: fmt.Sprintf("spec.ports[%d]", i), sp: sp}
		switch pr := cmp.Or(sp.Protocol, corev1.ProtocolTCP); pr {
		case corev1.ProtocolTCP:
			p.proto = v1alpha1.ProtocolTCP
		case corev1.ProtocolUDP:
			p.proto = v1alpha1.ProtocolUDP
		default:
			b.warnf(e.ref, p.field+".protocol", "%s is not supported (TCP and UDP are): port %d is not served", pr, sp.Port)
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			b.errorf(e.ref, p.field+".port", "port %d out of range 1-65535; not served", sp.Port)
			continue
		}
		if other, dup := seen[portKey(p)]; dup {
			b.errorf(e.ref, p.field, "duplicate port %d/%s (also %s); not served twice", sp.Port, p.proto, other)
			continue
		}
		seen[portKey(p)] = p.field
		e.ports = append(e.ports, p)
	}
	if len(e.ports) == 0 {
		b.fail(e, "spec.ports", "no TCP or UDP port to serve")
	}

	e.local = s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	e.fwd = b.serviceForwarding(e.ref, s)
	if e.local && e.fwd.GetMode() == pb.ForwardingMode_FORWARDING_MODE_NAT && !e.fwd.GetPreserveClientIp() {
		// Local traffic policy promises the backends the client's address
		// (that is its point), so the NAT keeps the source.
		if v, ok := ann[v1alpha1.AnnotationPreserveClientIP]; ok && v == "false" {
			b.warnf(e.ref, annotationField(v1alpha1.AnnotationPreserveClientIP), "ignored: externalTrafficPolicy Local keeps the client's address (NAT without SNAT)")
		}
		e.fwd.PreserveClientIp = true
	}

	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		e.affinity, e.affinityTTL = pb.Affinity_AFFINITY_CLIENT_IP, uint32(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := s.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			e.affinityTTL = uint32(*c.ClientIP.TimeoutSeconds)
		}
		// The fast path places a client's flows by its address alone
		// (Maglev over the source address), so they stay together as long
		// as the endpoints do; the timeout has nothing to expire.
	}

	e.key = strings.TrimSpace(ann[v1alpha1.AnnotationAllowSharedIP])
	e.vip = ServiceVIPName(ns, s.Name)
	if e.key != "" {
		e.vip = SharedVIPName(e.key)
	}

	return e
}

// parseRequested reads the addresses a Service asks for.
func (b *builder) parseRequested(e *svcEntry) {
	s := e.svc
	var parts []string
	if v, ok := s.Annotations[v1alpha1.AnnotationLoadBalancerIPs]; ok {
		e.requestField = annotationField(v1alpha1.AnnotationLoadBalancerIPs)
		parts = strings.Split(v, ",")
		if s.Spec.LoadBalancerIP != "" {
			b.warnf(e.ref, "spec.loadBalancerIP", "ignored: the %s annotation takes precedence", v1alpha1.AnnotationLoadBalancerIPs)
		}
	} else if s.Spec.LoadBalancerIP != "" {
		e.requestField = "spec.loadBalancerIP"
		parts = []string{s.Spec.LoadBalancerIP}
	} else {
		return
	}
	bad := false
	for _, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil || a.Zone() != "" {
			b.fail(e, e.requestField, "invalid IP address %q", part)
			bad = true
			continue
		}
		a = a.Unmap()
		if i := slices.IndexFunc(e.requested, func(x netip.Addr) bool { return x.Is4() == a.Is4() }); i >= 0 {
			b.fail(e, e.requestField, "two IPv%d addresses (%s and %s): a Service has at most one address per family", family(a), e.requested[i], a)
			bad = true
			continue
		}
		e.requested = append(e.requested, a)
	}
	if len(e.requested) == 0 && !bad {
		b.fail(e, e.requestField, "no address given")
	}
	slices.SortFunc(e.requested, func(x, y netip.Addr) int { return x.Compare(y) })
}

// parseFamilies reads the address families a Service wants.
func (b *builder) parseFamilies(e *svcEntry) {
	for i, f := range e.svc.Spec.IPFamilies {
		var fam int
		switch f {
		case corev1.IPv4Protocol:
			fam = 4
		case corev1.IPv6Protocol:
			fam = 6
		default:
			b.fail(e, fmt.Sprintf("spec.ipFamilies[%d]", i), "unknown family %q: use IPv4 or IPv6", f)
			continue
		}
		if !slices.Contains(e.families, fam) {
			e.families = append(e.families, fam)
		}
	}
	if len(e.families) == 0 {
		// Files may leave ipFamilies out (the apiserver fills it in): take
		// the families of what is asked for, else of what status holds.
		from := e.requested
		if len(from) == 0 {
			from = e.current
		}
		for _, a := range from {
			if !slices.Contains(e.families, family(a)) {
				e.families = append(e.families, family(a))
			}
		}
	}
	if len(e.families) == 0 {
		e.families = []int{4}
	}
	slices.Sort(e.families)
	for _, a := range e.requested {
		if !slices.Contains(e.families, family(a)) {
			b.fail(e, e.requestField, "address %s is IPv%d, but the Service's spec.ipFamilies are %v", a, family(a), e.svc.Spec.IPFamilies)
		}
	}
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// canShare checks that e may join the Services of g on one address, as
// MetalLB's sharing rules say, reporting why not. The older Services keep
// the address.
func (b *builder) canShare(g *svcGroup, e *svcEntry) bool {
	f := g.first()
	refuse := func(field, format string, args ...any) bool {
		b.fail(e, field, "cannot share an address with Service %s under key %q: %s; the older Services keep the address and this one is not served",
			key(f.ns, f.svc.Name), g.key, fmt.Sprintf(format, args...))
		return false
	}
	shareField := annotationField(v1alpha1.AnnotationAllowSharedIP)
	switch {
	case e.poolName != g.poolName:
		return refuse(annotationField(v1alpha1.AnnotationAddressPool), "it asks for pool %q, they for %q", e.poolName, g.poolName)
	case len(e.requested) > 0 && len(g.requested) > 0 && !slices.Equal(e.requested, g.requested):
		return refuse(e.requestField, "it asks for %v, they for %v", e.requested, g.requested)
	case !slices.Equal(e.families, f.families):
		return refuse("spec.ipFamilies", "it wants IPv%v, they IPv%v", e.families, f.families)
	case e.local != f.local:
		return refuse("spec.externalTrafficPolicy", "externalTrafficPolicy differs (the nodes announcing the address depend on it)")
	case e.local && !maps.Equal(e.svc.Spec.Selector, f.svc.Spec.Selector):
		return refuse("spec.selector", "with externalTrafficPolicy Local the Services must select the same pods, since the nodes hosting them announce the address")
	case !proto.Equal(e.fwd, f.fwd):
		return refuse(shareField, "the forwarding annotations differ (one address has one forwarding)")
	}
	for _, p := range e.ports {
		if o := g.ports[portKey(p)]; o != nil {
			return refuse(p.field, "%s port %d is already served there by Service %s", p.proto, p.sp.Port, key(o.ns, o.svc.Name))
		}
	}
	return true
}

// serviceVIPs builds the VIPs of the Services, claiming their addresses in
// claimed (which holds the ProxyVIPs' static addresses already, and
// receives these before pool allocation).
func (b *builder) serviceVIPs(claimed map[netip.Addr]*vipEntry) []*vipEntry {
	_, groups := b.selectServices()
	var out []*vipEntry
	for _, g := range groups {
		f := g.first()
		v := &vipEntry{
			obj: &v1alpha1.ProxyVIP{
				ObjectMeta: metav1.ObjectMeta{Name: g.name},
				Spec:       v1alpha1.ProxyVIPSpec{Mode: v1alpha1.VIPModeL2ARP},
			},
			ref: f.ref, families: f.families, accepted: true, svc: g,
		}
		out = append(out, v)
		if slices.ContainsFunc(b.vips, func(x *vipEntry) bool { return x.obj.Name == g.name }) {
			b.failGroup(v, "metadata.name", "a ProxyVIP is named %q, the name of this Service's VIP; rename the ProxyVIP", g.name)
			continue
		}
		addrs, ok := b.serviceAddresses(v)
		if !ok {
			v.accepted = false
			continue
		}
		for _, a := range addrs {
			if other := claimed[a]; other != nil {
				b.failGroup(v, "", "address %s is already used by %s, which keeps it", a, other.describe())
			}
		}
		if !v.accepted {
			continue
		}
		for _, a := range addrs {
			claimed[a] = v
		}
		v.addrs = addrs
		if b.in.Decisions == nil && f.local && !slices.Contains(b.endpointNodes(f), b.opts.Node.Name) {
			for _, m := range g.members {
				b.warnf(m.ref, "spec.externalTrafficPolicy", "Local, and no ready endpoint runs on node %s: the node does not announce the address (its traffic would have nowhere to go)", b.opts.Node.Name)
			}
			v.accepted = false
			continue
		}
		v.pb = &pb.VIP{Name: g.name, Mode: pb.VIPMode_VIP_MODE_L2ARP, Forwarding: cloneForwarding(f.fwd)}
		for _, a := range addrs {
			v.pb.Addresses = append(v.pb.Addresses, a.String())
		}
		for _, m := range g.members {
			for _, p := range m.ports {
				v.pb.Ports = append(v.pb.Ports, uint32(p.sp.Port))
			}
		}
		slices.Sort(v.pb.Ports)
		v.pb.Ports = slices.Compact(v.pb.Ports)
	}
	return out
}

// failGroup reports an error on every Service of a VIP and leaves it out.
// An empty field names where each Service's address comes from.
func (b *builder) failGroup(v *vipEntry, field, format string, args ...any) {
	for _, m := range v.svc.members {
		b.errorf(m.ref, cmp.Or(field, addressField(m)), format, args...)
	}
	v.accepted = false
}

func addressField(m *svcEntry) string {
	if m.requestField != "" && len(m.current) == 0 {
		return m.requestField
	}
	return "status.loadBalancer.ingress"
}

// serviceAddresses returns the addresses of a Services' VIP, sorted: the
// controller's decision; without one (standalone), what status holds, else
// what the Services ask for. ok is false when there is none.
func (b *builder) serviceAddresses(v *vipEntry) ([]netip.Addr, bool) {
	g := v.svc
	var have []netip.Addr
	if d := b.in.Decisions; d != nil {
		have = d.Addresses[g.name]
	} else {
		for _, m := range g.members {
			if len(m.current) > 0 {
				have = m.current
				if len(g.requested) > 0 && !slices.Equal(sortedAddrs(m.current), g.requested) {
					b.warnf(m.ref, g.requestField, "status.loadBalancer.ingress holds %v, which is served; the requested %v are not", m.current, g.requested)
				}
				break
			}
		}
		if len(have) == 0 {
			have = g.requested
		}
	}
	var out []netip.Addr
	var missing []string
	for _, fam := range v.families {
		if a, ok := decidedAddr(have, fam); ok {
			out = append(out, a)
		} else {
			missing = append(missing, fmt.Sprintf("IPv%d", fam))
		}
	}
	switch {
	case len(out) == 0 && b.in.Decisions != nil:
		for _, m := range g.members {
			b.warnf(m.ref, "status.loadBalancer.ingress", "no address allocated yet; the Service is served once the controller assigns one")
		}
		return nil, false
	case len(out) == 0:
		for _, m := range g.members {
			b.errorf(m.ref, cmp.Or(m.requestField, annotationField(v1alpha1.AnnotationLoadBalancerIPs)), "no address: without a controller to allocate one, set the %s annotation (or status.loadBalancer.ingress)", v1alpha1.AnnotationLoadBalancerIPs)
		}
		return nil, false
	case len(missing) > 0:
		for _, m := range g.members {
			b.warnf(m.ref, "spec.ipFamilies", "no %s address yet; served on %s only", strings.Join(missing, " or "), out[0])
		}
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return out, true
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return out
}

// addServiceVIPs adds the Services' VIPs after the ProxyVIPs. They are not
// in vipsByName: gateways cannot name them in vipRef.
func (b *builder) addServiceVIPs(vs []*vipEntry) {
	b.vips = append(b.vips, vs...)
}

// endpointNodes returns the nodes hosting a ready, not terminating endpoint
// of e's Service, sorted.
func (b *builder) endpointNodes(e *svcEntry) []string {
	se := b.services[key(e.ns, e.svc.Name)]
	if se == nil {
		return nil
	}
	var out []string
	for _, es := range se.slices {
		for _, ep := range es.Endpoints {
			c := ep.Conditions
			if n := ptrOr(ep.NodeName, ""); n != "" && ptrOr(c.Ready, true) && !ptrOr(c.Terminating, false) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// svcPortName names the listener, route and backend of one port of a
// Service: "Service/<ns>/<name>/<tcp|udp>-<port>".
func svcPortName(m *svcEntry, p svcPort) string {
	return fmt.Sprintf("%s/%s-%d", ServiceVIPName(m.ns, m.svc.Name), strings.ToLower(string(p.proto)), p.sp.Port)
}

// buildServices adds a listener, route and backend for every port of every
// served Service. It runs after buildGateways, whose listeners keep their
// ports: a ProxyGateway without vipRef binds every address.
func (b *builder) buildServices() {
	for _, v := range b.vips {
		if v.svc == nil || !v.accepted {
			continue
		}
		for _, m := range v.svc.members {
			for _, p := range m.ports {
				b.buildServicePort(v, m, p)
			}
		}
	}
}

func (b *builder) buildServicePort(v *vipEntry, m *svcEntry, p svcPort) {
	tr, port := transport(p.proto), uint32(p.sp.Port)
	for _, o := range b.listeners {
		if len(o.pb.Addresses) == 0 && o.pb.Port == port && transport(o.spec.Protocol) == tr {
			b.errorf(m.ref, p.field, "%s port %d is held on every address by listener %s (a ProxyGateway without vipRef); not served", tr, port, o.pb.Name)
			return
		}
	}
	name := svcPortName(m, p)
	// externalTrafficPolicy Local: each node balances over its own
	// endpoints only. This is the one place where the cluster part of a
	// snapshot differs between nodes (the backend and the plan's table
	// input of such a port); every other Service, VIP and route is
	// identical everywhere.
	node := ""
	if m.local {
		node = b.opts.Node.Name
	}
	be := &pb.Backend{
		Name: name, Protocol: string(p.proto), LbPolicy: pb.LBPolicy_LB_POLICY_ROUND_ROBIN,
		ConnectTimeoutMs: 5000,
		Endpoints:        b.sliceEndpoints(b.services[key(m.ns, m.svc.Name)], p.sp, node),
	}
	if m.affinity == pb.Affinity_AFFINITY_CLIENT_IP {
		be.LbPolicy, be.HashPolicy = pb.LBPolicy_LB_POLICY_MAGLEV, &pb.HashPolicy{SourceIp: true}
	}
	b.backends[name] = be

	gwName := ServiceVIPName(m.ns, m.svc.Name)
	gw := &gatewayEntry{
		obj: &v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Name: gwName, Namespace: m.ns}},
		ns:  m.ns, ref: m.ref, vip: v,
	}
	l := &listenerEntry{
		gw: gw, field: p.field, sni: map[string]string{},
		spec: &v1alpha1.Listener{Name: strings.TrimPrefix(name, gwName+"/"), Port: v1alpha1.PortNumber(port), Protocol: p.proto},
		pb: &pb.Listener{
			Name: name, Gateway: gwName, Vip: v.obj.Name, Addresses: slices.Clone(v.pb.Addresses),
			Port: port, Protocol: protocols[p.proto],
		},
	}
	rt := &pb.Route{
		Name: name, Kind: l.routeKind(), Source: kService + "/" + key(m.ns, m.svc.Name),
		Rules: []*pb.RouteRule{{Backends: []*pb.WeightedBackend{{Backend: name, Weight: 1}}}},
	}
	attach(rt, l)
	l.l4 = rt
	b.routes = append(b.routes, rt)
	b.listeners = append(b.listeners, l)
}

// servicePlan marks the plan entries of Services with ClientIP session
// affinity, and those of Services with externalTrafficPolicy Local as
// node-local.
func (b *builder) servicePlan() {
	members := map[string]*svcEntry{}
	for _, v := range b.vips {
		if v.svc == nil || !v.accepted {
			continue
		}
		for _, m := range v.svc.members {
			for _, p := range m.ports {
				members[svcPortName(m, p)] = m
			}
		}
	}
	for _, e := range b.plan {
		m := members[e.Listener]
		if m == nil || e.Path != pb.DataPath_DATA_PATH_FAST {
			continue
		}
		if m.affinity != pb.Affinity_AFFINITY_NONE {
			e.Affinity, e.AffinityTimeoutS = m.affinity, m.affinityTTL
		}
		e.NodeLocal = m.local
	}
}
