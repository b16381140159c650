// Package controlplane_test runs the controller against a real
// kube-apiserver and etcd (test/kubeenv) with agents connected over gRPC
// with mTLS, as in a cluster: everything but the kubelet, which envtest does
// not run (Nodes and EndpointSlices are written by the tests).
package controlplane_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/controller"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

func (c *cluster) pool(name string, cidrs ...string) *v1alpha1.ProxyIPPool {
	p := &v1alpha1.ProxyIPPool{ObjectMeta: metav1.ObjectMeta{Name: c.name(name)}, Spec: v1alpha1.ProxyIPPoolSpec{CIDRs: cidrs}}
	c.create(p)
	return p
}

func (c *cluster) vip(name, pool string, mutate ...func(*v1alpha1.ProxyVIP)) *v1alpha1.ProxyVIP {
	v := &v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Name: c.name(name)}, Spec: v1alpha1.ProxyVIPSpec{Mode: v1alpha1.VIPModeL2ARP}}
	if pool != "" {
		v.Spec.PoolRef = &v1alpha1.LocalObjectRef{Name: pool}
	}
	for _, m := range mutate {
		m(v)
	}
	c.create(v)
	return v
}

func (c *cluster) getVIP(name string) *v1alpha1.ProxyVIP {
	var v v1alpha1.ProxyVIP
	if err := c.env.Client.Get(c.ctx, types.NamespacedName{Name: name}, &v); err != nil {
		c.t.Fatalf("get ProxyVIP %s: %v", name, err)
	}
	return &v
}

func (c *cluster) getService(name string) *corev1.Service {
	var s corev1.Service
	if err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: name}, &s); err != nil {
		c.t.Fatalf("get Service %s: %v", name, err)
	}
	return &s
}

// service creates a Service of type LoadBalancer on port 80 and its
// EndpointSlice with the given endpoints (address → node).
func (c *cluster) service(name string, local bool, eps ...endpoint) (*corev1.Service, *discoveryv1.EndpointSlice) {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	c.create(s)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: c.ns, Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, e.slice())
	}
	c.create(es)
	return s, es
}

type endpoint struct {
	addr, node  string
	terminating bool
}

func (e endpoint) slice() discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: []string{e.addr}, NodeName: ptr(e.node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(!e.terminating), Serving: ptr(true), Terminating: ptr(e.terminating)},
	}
}

func ptr[T any](v T) *T { return &v }

// endpointState finds addr among the backends of snap.
func endpointState(snap *pb.ConfigSnapshot, addr string) (pb.EndpointState, bool) {
	for _, b := range snap.GetCluster().GetBackends() {
		for _, e := range b.GetEndpoints() {
			if e.GetAddress() == addr {
				return e.GetState(), true
			}
		}
	}
	return 0, false
}

// role is the node's role for vip in snap.
func role(snap *pb.ConfigSnapshot, vip string) pb.VIPRole {
	for _, a := range snap.GetNode().GetVips() {
		if a.GetVip() == vip {
			return a.GetRole()
		}
	}
	return pb.VIPRole_VIP_ROLE_UNSPECIFIED
}

func condition(cs []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(cs, typ); c != nil {
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
	return "none"
}

// TestControlPlane is the acceptance test of the control plane with one
// controller and two agents: allocation into status, Services of type
// LoadBalancer, snapshots reaching agents, EndpointSlice changes and
// terminating endpoints, externalTrafficPolicy Local, bad pools, and an L2
// VIP moving to its standby when its active agent dies.
func TestControlPlane(t *testing.T) {
	c := newCluster(t)
	n1, n2 := c.addNode(c.name("n1"), nil).Name, c.addNode(c.name("n2"), nil).Name
	r := c.startController("r1")
	a1 := c.startAgent(n1, r, "")
	a2 := c.startAgent(n2, r, "")
	agents := map[string]*node{n1: a1, n2: a2}

	pool := c.pool("pool", "10.77.1.0/29")
	inPool := func(s string) bool {
		a, err := netip.ParseAddr(s)
		return err == nil && netip.MustParsePrefix("10.77.1.0/29").Contains(a)
	}

	var web *v1alpha1.ProxyVIP
	t.Run("pool and VIP: address allocated and shown in status", func(t *testing.T) {
		web = c.vip("web", pool.Name)
		c.eventually("the VIP's address, nodes and Ready condition", func() (bool, string) {
			web = c.getVIP(web.Name)
			s := web.Status
			ok := inPool(s.Address) && s.ActiveNode != "" && len(s.StandbyNodes) == 1 && s.StandbyNodes[0] != s.ActiveNode &&
				meta.IsStatusConditionTrue(s.Conditions, controller.CondReady) && meta.IsStatusConditionTrue(s.Conditions, controller.CondAccepted)
			return ok, fmt.Sprintf("%+v", s)
		})
		c.eventually("the pool's status to list the allocation", func() (bool, string) {
			var p v1alpha1.ProxyIPPool
			if err := c.env.Client.Get(c.ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
				return false, err.Error()
			}
			want := v1alpha1.PoolAllocation{Address: web.Status.Address, Owner: "ProxyVIP/" + web.Name}
			return slices.Contains(p.Status.Allocations, want) && p.Status.Allocated == 1 && p.Status.Available == 7, fmt.Sprintf("%+v", p.Status)
		})
	})

	t.Run("agents receive their part: one active, one standby", func(t *testing.T) {
		c.eventually("both agents to apply the VIP", func() (bool, string) {
			r1, r2 := role(agents[web.Status.ActiveNode].state(), web.Name), role(agents[web.Status.StandbyNodes[0]].state(), web.Name)
			return r1 == pb.VIPRole_VIP_ROLE_ACTIVE && r2 == pb.VIPRole_VIP_ROLE_STANDBY, fmt.Sprint(r1, r2)
		})
	})

	var es *discoveryv1.EndpointSlice
	t.Run("Service of type LoadBalancer gets an address from the pool", func(t *testing.T) {
		_, es = c.service("shop", false, endpoint{addr: "10.1.0.1", node: n1})
		c.eventually("the Service's ingress address and nodes", func() (bool, string) {
			s := c.getService("shop")
			in := s.Status.LoadBalancer.Ingress
			return len(in) == 1 && inPool(in[0].IP) && in[0].IP != web.Status.Address && in[0].IPMode != nil && *in[0].IPMode == corev1.LoadBalancerIPModeVIP &&
				s.Annotations[controller.AnnotationActiveNode] != "", fmt.Sprintf("%+v %v", in, s.Annotations)
		})
		c.eventually("the agents to get the Service's endpoint", func() (bool, string) {
			st, ok := endpointState(a1.state(), "10.1.0.1")
			return ok && st == pb.EndpointState_ENDPOINT_STATE_HEALTHY, fmt.Sprint(st, ok)
		})
	})

	t.Run("an EndpointSlice change reaches the agents as a new version", func(t *testing.T) {
		before := a1.state().GetVersion()
		c.update(es, func() { es.Endpoints = append(es.Endpoints, endpoint{addr: "10.1.0.2", node: n2}.slice()) }, false)
		c.eventually("the new endpoint on both agents", func() (bool, string) {
			_, ok1 := endpointState(a1.state(), "10.1.0.2")
			_, ok2 := endpointState(a2.state(), "10.1.0.2")
			return ok1 && ok2 && a1.state().GetVersion() > before, fmt.Sprint(ok1, ok2, a1.state().GetVersion())
		})
	})

	t.Run("a terminating endpoint drains: no new flows, existing ones continue", func(t *testing.T) {
		c.update(es, func() { es.Endpoints[0] = endpoint{addr: "10.1.0.1", node: n1, terminating: true}.slice() }, false)
		c.eventually("the endpoint to be draining on the agents", func() (bool, string) {
			st, ok := endpointState(a2.state(), "10.1.0.1")
			return ok && st == pb.EndpointState_ENDPOINT_STATE_DRAINING, fmt.Sprint(st, ok)
		})
	})

	t.Run("externalTrafficPolicy Local: only nodes with a local endpoint serve", func(t *testing.T) {
		c.service("local", true, endpoint{addr: "10.1.1.1", node: n2})
		c.eventually("the Service to be served by its endpoint's node only", func() (bool, string) {
			s := c.getService("local")
			return len(s.Status.LoadBalancer.Ingress) == 1 && s.Annotations[controller.AnnotationActiveNode] == n2 &&
				s.Annotations[controller.AnnotationStandbyNodes] == "", fmt.Sprint(s.Annotations)
		})
		vip := snapshot.ServiceVIPName(c.ns, "local")
		c.eventually("n2 active and n1 not serving", func() (bool, string) {
			r1, r2 := role(a1.state(), vip), role(a2.state(), vip)
			return r1 == pb.VIPRole_VIP_ROLE_UNSPECIFIED && r2 == pb.VIPRole_VIP_ROLE_ACTIVE, fmt.Sprint(r1, r2)
		})
	})

	t.Run("overlapping pool and an address outside its pool: conditions, no crash", func(t *testing.T) {
		bad := c.pool("overlap", "10.77.1.4/30")
		out := c.vip("outside", pool.Name, func(v *v1alpha1.ProxyVIP) { v.Spec.Address = "10.77.9.1" })
		c.eventually("the overlapping pool's condition", func() (bool, string) {
			var p v1alpha1.ProxyIPPool
			if err := c.env.Client.Get(c.ctx, client.ObjectKeyFromObject(bad), &p); err != nil {
				return false, err.Error()
			}
			cond := condition(p.Status.Conditions, controller.CondAccepted)
			ok := strings.HasPrefix(cond, "False/") && strings.Contains(cond, "overlaps ProxyIPPool "+pool.Name)
			if ok {
				return true, ""
			}
			// Every pool the controller sees, for a failure that only a
			// loaded CI run has shown so far.
			var all v1alpha1.ProxyIPPoolList
			if err := c.env.Client.List(c.ctx, &all); err != nil {
				return false, cond + "; list pools: " + err.Error()
			}
			var b strings.Builder
			for _, q := range all.Items {
				fmt.Fprintf(&b, "; pool %s created %s cidrs %v accepted %s", q.Name, q.CreationTimestamp.UTC().Format(time.RFC3339), q.Spec.CIDRs,
					condition(q.Status.Conditions, controller.CondAccepted))
			}
			return false, cond + b.String()
		})
		c.eventually("the VIP's condition", func() (bool, string) {
			cond := condition(c.getVIP(out.Name).Status.Conditions, controller.CondAccepted)
			return strings.HasPrefix(cond, "False/") && strings.Contains(cond, "outside ProxyIPPool "+pool.Name), cond
		})
		// Still deciding: a new VIP gets an address.
		more := c.vip("more", pool.Name)
		c.eventually("the next VIP's address", func() (bool, string) {
			s := c.getVIP(more.Name).Status
			return inPool(s.Address), s.Address
		})
	})

	t.Run("an agent that dies hands its L2 VIP to the first standby", func(t *testing.T) {
		web = c.getVIP(web.Name)
		active, standby := web.Status.ActiveNode, web.Status.StandbyNodes[0]
		agents[active].stop()
		c.eventually("the standby to become active", func() (bool, string) {
			s := c.getVIP(web.Name).Status
			return s.ActiveNode == standby && s.Address == web.Status.Address, fmt.Sprintf("%+v", s)
		})
		c.eventually("the standby agent to apply its new role", func() (bool, string) {
			r := role(agents[standby].state(), web.Name)
			return r == pb.VIPRole_VIP_ROLE_ACTIVE, r.String()
		})
	})
}

// TestControllerRestartKeepsAllocations: a new controller process reads the
// allocations back from status and moves nothing.
func TestControllerRestartKeepsAllocations(t *testing.T) {
	c := newCluster(t)
	c.addNode(c.name("n1"), nil)
	pool := c.pool("pool", "10.77.2.0/28")
	r := c.startController("r1")
	var names []string
	for i := range 4 {
		names = append(names, c.vip(fmt.Sprintf("v%d", i), pool.Name).Name)
	}
	c.service("svc", false, endpoint{addr: "10.2.0.1", node: c.name("n1")})
	before := map[string]string{}
	c.eventually("every address", func() (bool, string) {
		for _, n := range names {
			before[n] = c.getVIP(n).Status.Address
		}
		in := c.getService("svc").Status.LoadBalancer.Ingress
		if len(in) == 1 {
			before["svc"] = in[0].IP
		}
		return !slices.Contains(mapValues(before), "") && len(before) == 5, fmt.Sprint(before)
	})
	r.stop(t)

	// While no controller runs: one VIP goes away, another arrives. The
	// newcomer may take the freed address; nobody else moves.
	var gone v1alpha1.ProxyVIP
	if err := c.env.Client.Get(c.ctx, types.NamespacedName{Name: names[1]}, &gone); err != nil {
		t.Fatal(err)
	}
	if err := c.env.Client.Delete(c.ctx, &gone); err != nil {
		t.Fatal(err)
	}
	late := c.vip("late", pool.Name)

	c.startController("r2")
	c.eventually("the new VIP's address", func() (bool, string) {
		a := c.getVIP(late.Name).Status.Address
		return a != "", a
	})
	for _, n := range []string{names[0], names[2], names[3]} {
		if got := c.getVIP(n).Status.Address; got != before[n] {
			t.Errorf("%s moved from %s to %s after the restart", n, before[n], got)
		}
	}
	if in := c.getService("svc").Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != before["svc"] {
		t.Errorf("the Service moved from %s to %+v after the restart", before["svc"], in)
	}
	if got := c.getVIP(late.Name).Status.Address; slices.Contains([]string{before[names[0]], before[names[2]], before[names[3]], before["svc"]}, got) {
		t.Errorf("the new VIP got %s, an address still held", got)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestLeaderFailover: of two replicas one leads; both serve agents from
// the decisions the leader persisted; when the leader stops, the other
// takes over; an agent that moves to the other replica never applies an
// older version than it had.
func TestLeaderFailover(t *testing.T) {
	c := newCluster(t)
	n1 := c.addNode(c.name("n1"), nil).Name
	pool := c.pool("pool", "10.77.3.0/29")
	r1 := c.startController("r1")
	c.eventually("r1 to lead", func() (bool, string) { return c.leader(r1), c.leaderIdentity() })
	r2 := c.startController("r2")

	// The agent talks to the follower: it still gets the leader's decisions.
	stateDir := t.TempDir()
	a := c.startAgent(n1, r2, stateDir)
	v := c.vip("web", pool.Name)
	c.eventually("the follower's agent to serve the VIP the leader placed", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		return s.ActiveNode == n1 && role(a.state(), v.Name) == pb.VIPRole_VIP_ROLE_ACTIVE, fmt.Sprintf("%+v", s)
	})
	if c.leader(r2) {
		t.Fatal("both replicas lead")
	}

	// The leader goes; r2 takes over and keeps deciding.
	r1.stop(t)
	c.eventually("r2 to lead", func() (bool, string) { return c.leader(r2), c.leaderIdentity() })
	v2 := c.vip("after", pool.Name)
	c.eventually("the new leader to allocate", func() (bool, string) {
		a := c.getVIP(v2.Name).Status.Address
		return a != "", a
	})
	c.eventually("the agent to apply the change", func() (bool, string) {
		return role(a.state(), v2.Name) == pb.VIPRole_VIP_ROLE_ACTIVE, fmt.Sprint(a.state().GetVersion())
	})

	// The agent restarts and connects to a replica that started after it
	// applied its last version: it restores its cache and never goes back.
	last := a.state().GetVersion()
	a.stop()
	r3 := c.startController("r3")
	b := c.startAgent(n1, r3, stateDir)
	c.update(v2, func() { v2.Spec.Interfaces = []string{"eth9"} }, false)
	c.eventually("the restarted agent to apply the change through r3", func() (bool, string) {
		for _, x := range b.state().GetNode().GetVips() {
			if x.GetVip() == v2.Name && slices.Equal(x.GetInterfaces(), []string{"eth9"}) {
				return true, ""
			}
		}
		return false, fmt.Sprint(b.state().GetVersion())
	})
	versions := append(a.rec.versions(), b.rec.versions()...)
	if !slices.IsSorted(versions) || slices.Min(b.rec.versions()) < last {
		t.Errorf("versions applied went backwards: first agent %v, after the restart %v", a.rec.versions(), b.rec.versions())
	}
}

// TestNACK: an agent whose appliers reject a snapshot NACKs it, the
// controller records the NACK, and the agent keeps serving the previous
// version.
func TestNACK(t *testing.T) {
	c := newCluster(t)
	n1 := c.addNode(c.name("n1"), nil).Name
	pool := c.pool("pool", "10.77.4.0/29")
	r := c.startController("r1")
	a := c.startAgent(n1, r, "")
	v := c.vip("web", pool.Name)
	c.eventually("the VIP on the agent", func() (bool, string) {
		return role(a.state(), v.Name) == pb.VIPRole_VIP_ROLE_ACTIVE, ""
	})
	good := a.state().GetVersion()
	// Stand in for a compile error: this applier refuses any snapshot
	// with the "poison" VIP.
	poison := c.name("poison")
	a.rec.mu.Lock()
	a.rec.failWith = func(s *pb.ConfigSnapshot) error {
		for _, x := range s.GetCluster().GetVips() {
			if x.GetName() == poison {
				return fmt.Errorf("cannot compile VIP %s", poison)
			}
		}
		return nil
	}
	a.rec.mu.Unlock()
	c.vip("poison", pool.Name)
	c.eventually("the controller to record the NACK", func() (bool, string) {
		ctl := r.ctl.Load()
		if ctl == nil {
			return false, "no controller"
		}
		for _, st := range r.agents() {
			if st.Node == n1 && strings.Contains(st.NackError, "cannot compile VIP "+poison) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", r.agents())
	})
	// Still the last good snapshot: older than the NACKed one, without the
	// poison (later snapshots without it may have arrived before it).
	var nacked uint64
	for _, st := range r.agents() {
		if st.Node == n1 {
			nacked = st.NackVersion
		}
	}
	if got := a.state().GetVersion(); got < good || got >= nacked {
		t.Errorf("the agent serves version %d after the NACK of %d, want the last good one (%d or later, before the NACK)", got, nacked, good)
	}
	for _, x := range a.state().GetCluster().GetVips() {
		if x.GetName() == poison {
			t.Errorf("the agent serves the snapshot it NACKed")
		}
	}
	if rej := a.agent.Rejected(); rej == nil || !strings.Contains(rej.Err.Error(), "cannot compile") {
		t.Errorf("the agent's rejection = %+v", rej)
	}
}

// TestUnhealthyAgentLosesItsVIPs: an agent that says it cannot serve (an
// applier failed) keeps its Lease but loses its L2 VIP to the standby; when
// it recovers, the VIP stays where it is (no move without a reason).
func TestUnhealthyAgentLosesItsVIPs(t *testing.T) {
	c := newCluster(t)
	n1, n2 := c.addNode(c.name("n1"), nil).Name, c.addNode(c.name("n2"), nil).Name
	pool := c.pool("pool", "10.77.5.0/29")
	r := c.startController("r1")
	agents := map[string]*node{n1: c.startAgent(n1, r, ""), n2: c.startAgent(n2, r, "")}
	v := c.vip("web", pool.Name)
	var active, standby string
	c.eventually("the VIP's nodes", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		if s.ActiveNode == "" || len(s.StandbyNodes) != 1 {
			return false, fmt.Sprintf("%+v", s)
		}
		active, standby = s.ActiveNode, s.StandbyNodes[0]
		return true, ""
	})

	sick := agents[active].rec
	sick.mu.Lock()
	sick.applyErr = fmt.Errorf("no room in the VIP table")
	sick.mu.Unlock()
	// Any change makes the agents apply a new snapshot.
	c.vip("other", pool.Name)
	c.eventually("the standby to take over from the unhealthy agent", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		return s.ActiveNode == standby, fmt.Sprintf("%+v", s)
	})
	var l coordinationv1.Lease
	if err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: lease.Name(active)}, &l); err != nil {
		t.Fatal(err)
	}
	if lease.Healthy(&l) || !strings.Contains(l.Annotations[lease.AnnotationReason], "no room in the VIP table") {
		t.Errorf("the unhealthy agent's Lease: %v", l.Annotations)
	}

	sick.mu.Lock()
	sick.applyErr = nil
	sick.mu.Unlock()
	c.vip("third", pool.Name)
	c.eventually("the recovered node to be a standby again", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		return s.ActiveNode == standby && slices.Equal(s.StandbyNodes, []string{active}), fmt.Sprintf("%+v", s)
	})
}

// TestProbeVerdicts: an endpoint most agents report as failing their health
// checks is taken out of every node's tables and shown in the backend's
// status; one agent's report alone changes nothing; when the agents see it
// recover, it comes back.
func TestProbeVerdicts(t *testing.T) {
	c := newCluster(t)
	var agents []*node
	r := c.startController("r1")
	for _, n := range []string{"n1", "n2", "n3"} {
		agents = append(agents, c.startAgent(c.addNode(c.name(n), nil).Name, r, ""))
	}
	be := &v1alpha1.ProxyBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "api"},
		Spec: v1alpha1.ProxyBackendSpec{
			Endpoints:   []v1alpha1.Endpoint{{Address: "10.3.0.1", Port: 80}, {Address: "10.3.0.2", Port: 80}},
			HealthCheck: &v1alpha1.HealthCheck{Type: "HTTP", HTTPPath: "/healthz"},
		},
	}
	c.create(be)
	stateOn := func(a *node) pb.EndpointState {
		st, _ := endpointState(a.state(), "10.3.0.1")
		return st
	}
	backendStatus := func() v1alpha1.ProxyBackendStatus {
		var b v1alpha1.ProxyBackend
		if err := c.env.Client.Get(c.ctx, client.ObjectKeyFromObject(be), &b); err != nil {
			t.Fatal(err)
		}
		return b.Status
	}
	c.eventually("the backend on every agent", func() (bool, string) {
		for _, a := range agents {
			if stateOn(a) != pb.EndpointState_ENDPOINT_STATE_HEALTHY {
				return false, a.name
			}
		}
		return backendStatus().HealthyEndpoints == 2, fmt.Sprintf("%+v", backendStatus())
	})

	reports := func(a *node, eps ...string) {
		a.probeFailures.Store(eps)
		c.eventually("the report in "+a.name+"'s Lease", func() (bool, string) {
			var l coordinationv1.Lease
			if err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: lease.Name(a.name)}, &l); err != nil {
				return false, err.Error()
			}
			return slices.Equal(lease.ProbeFailures(&l), eps), fmt.Sprint(l.Annotations)
		})
	}

	// One of three: no majority. A decision run after the report (a new
	// VIP getting its address) leaves the endpoint in.
	reports(agents[0], "10.3.0.1:80")
	pool := c.pool("pool", "10.77.6.0/30")
	v := c.vip("probe", pool.Name)
	c.eventually("a decision after the report", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		return s.Address != "", s.Address
	})
	if st := backendStatus(); len(st.UnhealthyEndpoints) != 0 || st.HealthyEndpoints != 2 {
		t.Fatalf("one agent's report took the endpoint out: %+v", st)
	}

	// Two of three: out on every node.
	reports(agents[1], "10.3.0.1:80")
	c.eventually("the endpoint out on every agent", func() (bool, string) {
		for _, a := range agents {
			if stateOn(a) != pb.EndpointState_ENDPOINT_STATE_UNHEALTHY {
				return false, a.name + " " + stateOn(a).String()
			}
		}
		st := backendStatus()
		return slices.Equal(st.UnhealthyEndpoints, []string{"10.3.0.1:80"}) && st.HealthyEndpoints == 1 && st.Endpoints == 2, fmt.Sprintf("%+v", st)
	})

	// The agents see it recover.
	reports(agents[0])
	reports(agents[1])
	c.eventually("the endpoint back on every agent", func() (bool, string) {
		for _, a := range agents {
			if stateOn(a) != pb.EndpointState_ENDPOINT_STATE_HEALTHY {
				return false, a.name
			}
		}
		st := backendStatus()
		return len(st.UnhealthyEndpoints) == 0 && st.HealthyEndpoints == 2, fmt.Sprintf("%+v", st)
	})
}
