package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/controller/schedule"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/ipam"
	"github.com/novaedge/novaedge/snapshot"
)

// decider makes and persists the decisions: addresses, assignments,
// conditions. It runs on the leader only.
type decider struct {
	c          *Controller
	gatewayAPI bool
	// warned remembers the last Warning Event per Service and reason.
	warned map[string]string
	// lineages computes the Maglev lineages to persist; set on first use.
	lineages *lineages
}

func (d *decider) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	w, err := d.c.world(ctx, d.gatewayAPI)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := d.c.now()

	// Addresses first: assignments are made for VIPs that have one.
	claims, static := addressClaims(w.in, w.services)
	pools := snapshot.AcceptedPools(w.in)
	allocs := allocate(pools, static, claims)
	for vip, a := range allocs {
		if len(a.addrs) > 0 {
			w.in.Decisions.Addresses[vip] = sortedAddrs(a.addrs)
		} else {
			delete(w.in.Decisions.Addresses, vip)
		}
	}

	// Probe verdicts: decided now from the agents' reports, replacing
	// what was persisted.
	elig := d.eligibility(w, now)
	failing := failingEndpoints(w, elig)
	w.in.Decisions.EndpointHealth = map[string]bool{}
	for ep := range failing {
		w.in.Decisions.EndpointHealth[ep] = false
	}

	// One build, for no node in particular, tells which VIPs are usable
	// and what is wrong with every resource.
	snap, diags := snapshot.Build(w.in, d.c.buildOptions("", nil))
	idx := indexDiagnostics(diags)

	var reqs []schedule.Request
	for _, v := range snap.GetCluster().GetVips() {
		nodes, minHealthy := elig.forVIP(w, v)
		reqs = append(reqs, schedule.Request{
			VIP: v.GetName(), Mode: vipModes[v.GetMode()], Eligible: nodes,
			Previous: w.in.Decisions.Assignments[v.GetName()], MinHealthyNodes: int32(minHealthy),
		})
	}
	results, err := schedule.Schedule(reqs)
	if err != nil {
		// The build only produces VIPs with a name and a known mode.
		return reconcile.Result{}, fmt.Errorf("schedule VIPs: %w", err)
	}
	asgs := map[string]scheduled{}
	for _, r := range results {
		asgs[r.VIP] = r
		if r.Changed {
			d.c.log.Info("VIP assignment", "vip", r.VIP, "active", r.Assignment.Active, "announcing", r.Assignment.Announcing, "reason", r.Reason)
		}
	}

	var errs []error
	errs = append(errs, d.writeVIPs(ctx, w, allocs, asgs, idx)...)
	errs = append(errs, d.writePools(ctx, w, pools, allocs, idx)...)
	errs = append(errs, d.writeServices(ctx, w, allocs, asgs, idx)...)
	errs = append(errs, d.writeConditions(ctx, w, idx, newBackendHealth(snap, failing))...)
	errs = append(errs, d.writeLineages(ctx, w, snap)...)
	d.c.metrics.decided(len(errs))
	if ctx.Err() != nil {
		// The controller is stopping: the writes left undone are the
		// next leader's, not an error to report.
		return reconcile.Result{}, nil
	}
	// Agent Leases expire without an event: look again soon.
	return reconcile.Result{RequeueAfter: d.c.opts.Resync}, errors.Join(errs...)
}

// scheduled is where one VIP goes.
type scheduled = schedule.Result

var vipModes = map[pb.VIPMode]v1alpha1.VIPMode{
	pb.VIPMode_VIP_MODE_L2ARP: v1alpha1.VIPModeL2ARP,
	pb.VIPMode_VIP_MODE_BGP:   v1alpha1.VIPModeBGP,
	pb.VIPMode_VIP_MODE_OSPF:  v1alpha1.VIPModeOSPF,
	pb.VIPMode_VIP_MODE_LOCAL: v1alpha1.VIPModeLocal,
}

// addressClaims turns ProxyVIPs with poolRef and served Services into
// claims, and collects the static addresses ProxyVIPs name.
func addressClaims(in *snapshot.Input, services []*serviceVIP) ([]claim, []netip.Addr) {
	var claims []claim
	var static []netip.Addr
	for i := range in.VIPs {
		v := &in.VIPs[i]
		have := map[int]bool{}
		for _, s := range []string{v.Spec.Address, v.Spec.IPv6Address} {
			if s == "" {
				continue
			}
			if a, err := ipam.ParseHost(s); err == nil {
				static = append(static, a)
				have[family(a)] = true
			}
		}
		if v.Spec.PoolRef == nil {
			continue
		}
		c := claim{
			vip: v.Name, owner: "ProxyVIP/" + v.Name, field: "spec.poolRef",
			pool: v.Spec.PoolRef.Name, created: v.CreationTimestamp.Time,
		}
		for _, f := range vipFamilies(v) {
			if !have[f] {
				c.families = append(c.families, f)
			}
		}
		if len(c.families) == 0 {
			continue
		}
		for _, a := range statusAddrs(v.Status.Address, v.Status.IPv6Address) {
			if !have[family(a)] {
				c.current = append(c.current, a)
			}
		}
		claims = append(claims, c)
	}
	for _, v := range services {
		m := v.members[0]
		field := m.RequestField
		if field == "" {
			field = "metadata.annotations[" + v1alpha1.AnnotationAddressPool + "]"
		}
		claims = append(claims, claim{
			vip: v.vip, owner: "Service/" + m.Namespace + "/" + m.Name, field: field,
			pool: m.Pool, families: m.Families, requested: m.Requested, current: v.addrs,
			created: m.Created.Time,
		})
	}
	return claims, static
}

// vipFamilies mirrors the builder: dual when asked or both addresses are
// given, else the one family asked for (IPv4 by default).
func vipFamilies(v *v1alpha1.ProxyVIP) []int {
	switch fam := v.Spec.AddressFamily; {
	case fam == v1alpha1.AddressFamilyDual || (fam == "" && v.Spec.Address != "" && v.Spec.IPv6Address != ""):
		return []int{4, 6}
	case fam == v1alpha1.AddressFamilyIPv6:
		return []int{6}
	default:
		return []int{4}
	}
}

func sortedAddrs(as []netip.Addr) []netip.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// eligibility knows which nodes can serve: Ready, with a fresh agent Lease
// whose agent does not report itself unhealthy.
type eligibility struct {
	ready  map[string]bool
	labels map[string]labels.Set
	order  []string
	// agents counts the Ready nodes that have an agent Lease, fresh or
	// not: the electorate of probe verdicts.
	agents int
}

func (d *decider) eligibility(w *world, now time.Time) eligibility {
	e := eligibility{ready: map[string]bool{}, labels: map[string]labels.Set{}}
	for i := range w.in.Nodes {
		n := &w.in.Nodes[i]
		e.labels[n.Name] = n.Labels
		if !nodeReady(n) {
			continue
		}
		// The well-known label that keeps a node out of load balancers
		// (cloud providers and MetalLB honour it too).
		if _, excluded := n.Labels[corev1.LabelNodeExcludeBalancers]; excluded {
			continue
		}
		l := w.agentLeases[n.Name]
		if l != nil {
			e.agents++
		}
		// Alive (its Lease is fresh) and able to serve (it says so).
		if l == nil || !lease.Fresh(l, now) || !lease.Healthy(l) {
			continue
		}
		e.ready[n.Name] = true
		e.order = append(e.order, n.Name)
	}
	slices.Sort(e.order)
	return e
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// forVIP returns the eligible nodes for one VIP of the build and its
// minimum of healthy nodes.
func (e eligibility) forVIP(w *world, v *pb.VIP) ([]string, int) {
	sel := labels.Everything()
	minHealthy := 1
	var localNodes map[string]bool
	if obj := findVIP(w.in, v.GetName()); obj != nil {
		if obj.Spec.NodeSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(obj.Spec.NodeSelector)
			if err != nil {
				return nil, minHealthy // reported by the build
			}
			sel = s
		}
		if hp := obj.Spec.HealthPolicy; hp != nil && hp.MinHealthyNodes > 0 {
			minHealthy = int(hp.MinHealthyNodes)
		}
	} else if svc := serviceForVIP(w.services, v.GetName()); svc != nil && svc.local {
		localNodes = svc.localNodes
	}
	var out []string
	for _, n := range e.order {
		if !sel.Matches(e.labels[n]) {
			continue
		}
		if localNodes != nil && !localNodes[n] {
			continue
		}
		out = append(out, n)
	}
	return out, minHealthy
}

func findVIP(in *snapshot.Input, name string) *v1alpha1.ProxyVIP {
	for i := range in.VIPs {
		if in.VIPs[i].Name == name {
			return &in.VIPs[i]
		}
	}
	return nil
}

// writeVIPs persists each ProxyVIP's addresses, assignment and conditions.
func (d *decider) writeVIPs(ctx context.Context, w *world, allocs map[string]*allocation, asgs map[string]scheduled, idx problemIndex) []error {
	var errs []error
	for i := range w.in.VIPs {
		v := &w.in.VIPs[i]
		want := v.Status.DeepCopy()
		want.ObservedGeneration = v.Generation
		var problems []string
		addrs := statusAddrs(v.Spec.Address, v.Spec.IPv6Address)
		if a := allocs[v.Name]; a != nil {
			addrs = append(addrs, a.addrs...)
			problems = a.problems
		}
		want.Address, want.IPv6Address = "", ""
		for _, a := range addrs {
			if a.Is4() {
				want.Address = a.String()
			} else {
				want.IPv6Address = a.String()
			}
		}
		s, served := asgs[v.Name]
		want.ActiveNode, want.StandbyNodes, want.AnnouncingNodes = s.Assignment.Active, s.Assignment.Standbys, s.Assignment.Announcing
		ref := diag.Ref{Kind: v1alpha1.KindProxyVIP, Name: v.Name}
		acc := idx.accepted(ref, v.Generation, problems...)
		ready := metav1.Condition{Type: CondReady, ObservedGeneration: v.Generation}
		switch {
		case acc.Status != metav1.ConditionTrue:
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonInvalid, "not accepted"
		case !served || len(addrs) == 0:
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonNoAddress, "the VIP has no address yet"
		case !s.Healthy:
			ready.Status, ready.Reason = metav1.ConditionFalse, ReasonNotEnough
			ready.Message = fmt.Sprintf("%d healthy node(s) serve it, healthPolicy.minHealthyNodes is %d", s.Serving, s.MinHealthyNodes)
		default:
			ready.Status, ready.Reason = metav1.ConditionTrue, ReasonHealthy
			ready.Message = fmt.Sprintf("%d healthy node(s) serve it", s.Serving)
		}
		want.Conditions, _ = setConditions(want.Conditions, acc, ready)
		if equality.Semantic.DeepEqual(&v.Status, want) {
			continue
		}
		orig := v.DeepCopy()
		v.Status = *want
		if err := d.c.mgr.GetClient().Status().Patch(ctx, v, client.MergeFrom(orig)); err != nil {
			errs = append(errs, fmt.Errorf("update status of ProxyVIP %s: %w", v.Name, err))
			continue
		}
		d.eventsForVIP(v, orig, s, problems)
	}
	return errs
}

func (d *decider) eventsForVIP(v, orig *v1alpha1.ProxyVIP, s scheduled, problems []string) {
	rec := d.c.recorder
	if orig.Status.Address != v.Status.Address && v.Status.Address != "" {
		rec.Eventf(v, nil, corev1.EventTypeNormal, ReasonAllocated, "Allocate", "address %s", v.Status.Address)
	}
	if orig.Status.IPv6Address != v.Status.IPv6Address && v.Status.IPv6Address != "" {
		rec.Eventf(v, nil, corev1.EventTypeNormal, ReasonAllocated, "Allocate", "address %s", v.Status.IPv6Address)
	}
	if orig.Status.ActiveNode != v.Status.ActiveNode || !slices.Equal(orig.Status.AnnouncingNodes, v.Status.AnnouncingNodes) {
		rec.Eventf(v, nil, corev1.EventTypeNormal, "Assigned", "Schedule", "%s", cmp.Or(s.Reason, "assignment changed"))
	}
	if len(problems) > 0 {
		rec.Eventf(v, nil, corev1.EventTypeWarning, ReasonPoolProblem, "Allocate", "%s", strings.Join(problems, "; "))
	}
}

// writePools persists each pool's allocations, counts and conditions.
func (d *decider) writePools(ctx context.Context, w *world, accepted []*ipam.Pool, allocs map[string]*allocation, idx problemIndex) []error {
	byPool := map[string][]v1alpha1.PoolAllocation{}
	owners := claimOwners(w)
	for vip, a := range allocs {
		for i, addr := range a.addrs {
			byPool[a.pools[i]] = append(byPool[a.pools[i]], v1alpha1.PoolAllocation{Address: addr.String(), Owner: owners[vip]})
		}
	}
	// Static addresses inside a pool are held there too.
	for i := range w.in.VIPs {
		v := &w.in.VIPs[i]
		for _, a := range statusAddrs(v.Spec.Address, v.Spec.IPv6Address) {
			for _, p := range accepted {
				if p.Contains(a) {
					byPool[p.Name] = append(byPool[p.Name], v1alpha1.PoolAllocation{Address: a.String(), Owner: "ProxyVIP/" + v.Name})
				}
			}
		}
	}
	size := map[string]int64{}
	for _, p := range accepted {
		n := p.Size()
		if n.IsInt64() && n.Int64() < 1<<62 {
			size[p.Name] = n.Int64()
		} else {
			size[p.Name] = 1 << 62
		}
	}
	var errs []error
	for i := range w.in.Pools {
		p := &w.in.Pools[i]
		want := p.Status.DeepCopy()
		want.ObservedGeneration = p.Generation
		list := byPool[p.Name]
		slices.SortFunc(list, func(a, b v1alpha1.PoolAllocation) int {
			return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
		})
		want.Allocations = list
		want.Allocated = int64(len(list))
		want.Available = max(size[p.Name]-want.Allocated, 0)
		acc := idx.accepted(diag.Ref{Kind: v1alpha1.KindProxyIPPool, Name: p.Name}, p.Generation)
		ready := metav1.Condition{Type: CondReady, ObservedGeneration: p.Generation, Status: metav1.ConditionTrue, Reason: "Available",
			Message: fmt.Sprintf("%d allocated, %d available", want.Allocated, want.Available)}
		switch {
		case acc.Status != metav1.ConditionTrue:
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonInvalid, "not accepted"
		case want.Available == 0:
			ready.Status, ready.Reason = metav1.ConditionFalse, "Exhausted"
			ready.Message = fmt.Sprintf("all %d addresses are allocated", want.Allocated)
		}
		want.Conditions, _ = setConditions(want.Conditions, acc, ready)
		if equality.Semantic.DeepEqual(&p.Status, want) {
			continue
		}
		orig := p.DeepCopy()
		p.Status = *want
		if err := d.c.mgr.GetClient().Status().Patch(ctx, p, client.MergeFrom(orig)); err != nil {
			errs = append(errs, fmt.Errorf("update status of ProxyIPPool %s: %w", p.Name, err))
			continue
		}
		if acc.Status != metav1.ConditionTrue && !conditionIs(orig.Status.Conditions, CondAccepted, metav1.ConditionFalse, acc.Message) {
			d.c.recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonInvalid, "Validate", "%s", acc.Message)
		}
	}
	return errs
}

func conditionIs(cs []metav1.Condition, typ string, status metav1.ConditionStatus, msg string) bool {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status == status && c.Message == msg
		}
	}
	return false
}

// claimOwners names the owner of each claimed VIP for pool status.
func claimOwners(w *world) map[string]string {
	out := map[string]string{}
	cs, _ := addressClaims(w.in, w.services)
	for _, c := range cs {
		out[c.vip] = c.owner
	}
	return out
}
