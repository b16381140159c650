package snapshot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// buildPlan decides, for every address:port a listener binds, whether the
// XDP fast path serves it or passes it to the Go slow path, and why. XDP
// picks a backend from the first packet, so anything that needs bytes past
// it (HTTP, SNI, TLS, policies) goes to the slow path.
func (b *builder) buildPlan() {
	for _, l := range b.listeners {
		path, reasons, endpoints, rt := b.decide(l)
		if path == pb.DataPath_DATA_PATH_UNSPECIFIED {
			continue
		}
		proto := pb.L4Protocol_L4_PROTOCOL_TCP
		if transport(l.spec.Protocol) == "udp" {
			proto = pb.L4Protocol_L4_PROTOCOL_UDP
		}
		addrs := l.pb.Addresses
		if len(addrs) == 0 {
			addrs = []string{"0.0.0.0", "::"}
			if path == pb.DataPath_DATA_PATH_FAST {
				path, endpoints = pb.DataPath_DATA_PATH_SLOW, nil
				reasons = []string{"gateway has no vipRef: it listens on every address, and the XDP fast path serves VIP addresses only"}
			}
		}
		var fwd *pb.Forwarding
		if v := l.gw.vip; path == pb.DataPath_DATA_PATH_FAST && v != nil {
			fwd = v.pb.Forwarding
			if fwd.Mode == pb.ForwardingMode_FORWARDING_MODE_DSR {
				b.checkDSRPorts(l, rt, v)
			}
		}
		for _, a := range addrs {
			b.plan = append(b.plan, &pb.PlanEntry{
				Vip: l.pb.Vip, Address: a, Port: l.pb.Port, Protocol: proto, Path: path,
				Reasons: reasons, Listener: l.pb.Name, Endpoints: endpoints,
				Forwarding: cloneForwarding(fwd),
			})
		}
	}
	slices.SortFunc(b.plan, func(x, y *pb.PlanEntry) int {
		ax, _ := netip.ParseAddr(x.Address)
		ay, _ := netip.ParseAddr(y.Address)
		return cmp.Or(ax.Compare(ay), cmp.Compare(x.Port, y.Port), cmp.Compare(x.Protocol, y.Protocol))
	})
}

// PlanKey names a plan entry by what the fast path matches: "address:port/
// protocol", e.g. "192.0.2.10:443/tcp" or "[2001:db8::1]:53/udp". The
// leader persists Maglev lineages under it.
func PlanKey(e *pb.PlanEntry) string {
	proto := "tcp"
	if e.GetProtocol() == pb.L4Protocol_L4_PROTOCOL_UDP {
		proto = "udp"
	}
	a, err := netip.ParseAddr(e.GetAddress())
	if err != nil {
		return fmt.Sprintf("%s:%d/%s", e.GetAddress(), e.GetPort(), proto)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(a.Unmap(), uint16(e.GetPort())), proto)
}

// lineagePlan gives every cluster-wide FAST entry the Maglev lineage the
// leader persisted for it.
func (b *builder) lineagePlan() {
	d := b.in.Decisions
	if d == nil || len(d.MaglevLineage) == 0 {
		return
	}
	for _, e := range b.plan {
		if e.Path == pb.DataPath_DATA_PATH_FAST && !e.NodeLocal {
			e.Lineage = d.MaglevLineage[PlanKey(e)]
		}
	}
}

// decide returns the path of a listener, why, and for FAST the table input
// and the route it comes from.
func (b *builder) decide(l *listenerEntry) (pb.DataPath, []string, []*pb.Endpoint, *pb.Route) {
	slow := pb.DataPath_DATA_PATH_SLOW
	var policyReasons []string
	for _, p := range l.pb.Policies {
		policyReasons = append(policyReasons, fmt.Sprintf("gateway policy %s applies to every request", p))
	}
	switch l.spec.Protocol {
	case v1alpha1.ProtocolHTTP:
		if l.pb.RedirectScheme != nil {
			return slow, append([]string{"HTTP listener answers every request with a redirect to " + l.pb.RedirectScheme.Scheme}, policyReasons...), nil, nil
		}
		return slow, append([]string{"HTTP listener: requests are routed by host, path and headers"}, policyReasons...), nil, nil
	case v1alpha1.ProtocolHTTPS:
		return slow, append([]string{"HTTPS listener: TLS is terminated and requests are routed at L7"}, policyReasons...), nil, nil
	case v1alpha1.ProtocolHTTP3:
		return slow, append([]string{"HTTP/3 listener: QUIC and TLS are terminated"}, policyReasons...), nil, nil
	}
	if len(l.pb.Policies) > 0 {
		return slow, policyReasons, nil, nil
	}
	if l.spec.Protocol == v1alpha1.ProtocolTLS && !l.passthrough() {
		if l.l4 == nil {
			b.warnf(l.gw.ref, l.field, "TLS listener has no route attached; connections are refused")
			return pb.DataPath_DATA_PATH_UNSPECIFIED, nil, nil, nil
		}
		return slow, []string{"TLS listener terminates TLS before forwarding"}, nil, nil
	}
	if l.passthrough() {
		switch {
		case len(l.tlsRoutes) == 0:
			b.warnf(l.gw.ref, l.field, "TLS passthrough listener has no route attached; connections are refused")
			return pb.DataPath_DATA_PATH_UNSPECIFIED, nil, nil, nil
		case len(l.tlsRoutes) == 1 && len(l.tlsRoutes[0].Hostnames) == 0 && len(l.spec.Hostnames) == 0:
			return pb.DataPath_DATA_PATH_FAST, []string{"TLS passthrough to a single route without hostnames: balanced per connection, SNI not needed"}, b.tableInput(l, l.tlsRoutes[0]), l.tlsRoutes[0]
		default:
			return slow, []string{fmt.Sprintf("TLS passthrough routed by SNI (%d routes, hostnames to match): the backend is known only after the ClientHello", len(l.tlsRoutes))}, nil, nil
		}
	}
	if l.l4 == nil {
		b.warnf(l.gw.ref, l.field, "%s listener has no route attached; nothing is served on port %d", l.spec.Protocol, l.spec.Port)
		return pb.DataPath_DATA_PATH_UNSPECIFIED, nil, nil, nil
	}
	return pb.DataPath_DATA_PATH_FAST, []string{fmt.Sprintf("%s listener with one route and only backendRefs: balanced per flow in XDP", l.spec.Protocol)}, b.tableInput(l, l.l4), l.l4
}

// tableInput merges the endpoints of a rule's backends into one weighted
// list, the input of the VIP's Maglev table. With several backends each
// gets its weight's share of a fixed total, split by endpoint weight.
func (b *builder) tableInput(l *listenerEntry, rt *pb.Route) []*pb.Endpoint {
	const total = 1_000_000
	rule := rt.Rules[0]
	var sumW uint64
	for _, wb := range rule.Backends {
		if b.backends[wb.Backend] != nil {
			sumW += uint64(wb.Weight)
		}
	}
	merged := map[netip.AddrPort]*pb.Endpoint{}
	var out []*pb.Endpoint
	healthy := 0
	for _, wb := range rule.Backends {
		be := b.backends[wb.Backend]
		if be == nil || sumW == 0 {
			continue
		}
		var sumU uint64
		for _, e := range be.Endpoints {
			sumU += uint64(e.Weight)
		}
		for _, e := range be.Endpoints {
			w := uint64(e.Weight)
			if len(rule.Backends) > 1 && sumU > 0 {
				w = total * uint64(wb.Weight) * w / (sumW * sumU)
				if w == 0 && e.Weight > 0 && wb.Weight > 0 {
					w = 1
				}
			}
			a, _ := netip.ParseAddr(e.Address)
			ap := netip.AddrPortFrom(a, uint16(e.Port))
			if m := merged[ap]; m != nil {
				m.Weight += uint32(min(w, uint64(^uint32(0))-uint64(m.Weight)))
				continue
			}
			ce := &pb.Endpoint{Address: e.Address, Port: e.Port, Weight: uint32(min(w, uint64(^uint32(0)))), State: e.State, Node: e.Node, Zone: e.Zone}
			if ce.Weight == 0 && ce.State == pb.EndpointState_ENDPOINT_STATE_HEALTHY {
				ce.State = pb.EndpointState_ENDPOINT_STATE_DRAINING
			}
			if ce.State == pb.EndpointState_ENDPOINT_STATE_HEALTHY {
				healthy++
			}
			merged[ap] = ce
			out = append(out, ce)
		}
	}
	if healthy == 0 {
		b.warnf(l.gw.ref, l.field, "no healthy endpoint behind route %s: new flows are dropped until one is", rt.Name)
	}
	sortEndpoints(out)
	return out
}
