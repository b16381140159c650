package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/snapshot"
)

// world is one consistent read of the cache.
type world struct {
	in *snapshot.Input
	// agentLeases by node name.
	agentLeases map[string]*coordinationv1.Lease
	// services are the Service VIPs NovaEdge serves.
	services []*serviceVIP
	// lineages are the Maglev lineage ConfigMaps, usable or not (nil
	// when the controller runs without lineages).
	lineages []persistedLineage
}

// world gathers everything a build needs from the cache, with the
// persisted Maglev lineages unless they are off.
func (c *Controller) world(ctx context.Context, gatewayAPI bool) (*world, error) {
	w, err := gather(ctx, c.mgr.GetCache(), &c.specs, c.opts.Namespace, gatewayAPI, !c.opts.ServeClasslessServices)
	if err != nil {
		return nil, err
	}
	if err := c.readPersistedLineages(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

// gather lists everything a build needs from r (the cache) and fills
// Decisions from what the leader persisted: VIP status addresses and
// assignments, Service ingress addresses and assignment annotations. The
// Maglev lineages are read by Controller.world.
func gather(ctx context.Context, r client.Reader, specs *specCache, namespace string, gatewayAPI, skipClassless bool) (*world, error) {
	in := &snapshot.Input{}
	var (
		vips     v1alpha1.ProxyVIPList
		pools    v1alpha1.ProxyIPPoolList
		gws      v1alpha1.ProxyGatewayList
		routes   v1alpha1.ProxyRouteList
		backends v1alpha1.ProxyBackendList
		policies v1alpha1.ProxyPolicyList
		secrets  corev1.SecretList
		svcs     corev1.ServiceList
		slices   discoveryv1.EndpointSliceList
		nodes    corev1.NodeList
		nss      corev1.NamespaceList
		ings     networkingv1.IngressList
		leases   coordinationv1.LeaseList
	)
	lists := []struct {
		name string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"ProxyVIPs", &vips, nil}, {"ProxyIPPools", &pools, nil}, {"ProxyGateways", &gws, nil},
		{"ProxyRoutes", &routes, []client.ListOption{client.UnsafeDisableDeepCopy}}, {"ProxyBackends", &backends, nil}, {"ProxyPolicies", &policies, nil},
		{"Secrets", &secrets, nil}, {"Services", &svcs, nil}, {"EndpointSlices", &slices, nil},
		{"Nodes", &nodes, nil}, {"Namespaces", &nss, nil}, {"Ingresses", &ings, nil},
		{"Leases", &leases, []client.ListOption{client.InNamespace(namespace)}},
	}
	for _, l := range lists {
		if err := r.List(ctx, l.list, l.opts...); err != nil {
			return nil, fmt.Errorf("list %s: %w", l.name, err)
		}
	}
	// Routes come without the cache's deep copy: specs makes them ours,
	// copying only what changed since the last list.
	specs.own(routes.Items)
	in.VIPs, in.Pools, in.Gateways, in.Routes = vips.Items, pools.Items, gws.Items, routes.Items
	in.Backends, in.Policies = backends.Items, policies.Items
	in.Secrets, in.Services, in.EndpointSlices = secrets.Items, svcs.Items, slices.Items
	in.Nodes, in.Namespaces, in.Ingresses = nodes.Items, nss.Items, ings.Items
	if gatewayAPI {
		var g gatewayv1.GatewayList
		var h gatewayv1.HTTPRouteList
		if err := r.List(ctx, &g); err != nil {
			return nil, fmt.Errorf("list Gateways: %w", err)
		}
		if err := r.List(ctx, &h); err != nil {
			return nil, fmt.Errorf("list HTTPRoutes: %w", err)
		}
		in.APIGateways, in.HTTPRoutes = g.Items, h.Items
	}

	w := &world{in: in, agentLeases: map[string]*coordinationv1.Lease{}}
	for i := range leases.Items {
		l := &leases.Items[i]
		if node, ok := lease.NodeOf(l.Name); ok {
			w.agentLeases[node] = l
		}
	}
	w.services = servedServices(in, skipClassless)
	in.Decisions = persistedDecisions(in, w.services)
	return w, nil
}

// persistedDecisions reads the leader's decisions back from status.
func persistedDecisions(in *snapshot.Input, services []*serviceVIP) *snapshot.Decisions {
	d := &snapshot.Decisions{Addresses: map[string][]netip.Addr{}, Assignments: map[string]snapshot.Assignment{}, EndpointHealth: map[string]bool{}}
	persistedHealth(in, d)
	for i := range in.VIPs {
		v := &in.VIPs[i]
		if as := statusAddrs(v.Status.Address, v.Status.IPv6Address); len(as) > 0 {
			d.Addresses[v.Name] = as
		}
		if a := vipAssignment(v); !a.empty() {
			d.Assignments[v.Name] = a.Assignment
		}
	}
	for _, s := range services {
		if len(s.addrs) > 0 {
			d.Addresses[s.vip] = s.addrs
		}
		if !s.assignment.empty() {
			d.Assignments[s.vip] = s.assignment.Assignment
		}
	}
	return d
}

func statusAddrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// assignment wraps snapshot.Assignment with the comparisons status needs.
type assignment struct{ snapshot.Assignment }

func (a assignment) empty() bool {
	return a.Active == "" && len(a.Standbys) == 0 && len(a.Announcing) == 0
}

func vipAssignment(v *v1alpha1.ProxyVIP) assignment {
	return assignment{snapshot.Assignment{
		Active:     v.Status.ActiveNode,
		Standbys:   v.Status.StandbyNodes,
		Announcing: v.Status.AnnouncingNodes,
	}}
}
