package controller

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// TestUninvolvedNodesShareOneBuild: the snapshots the publisher derives
// from one build equal what a full build for each node gives: as they are
// for nodes that serve nothing, with their own node part for nodes that
// serve VIPs; and nodes hosting endpoints of a Local Service, whose cluster
// part differs, are told apart.
func TestUninvolvedNodesShareOneBuild(t *testing.T) {
	ptr := func(s string) *string { return &s }
	tru := true
	svc := func(name string, local bool) corev1.Service {
		s := corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if local {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		return s
	}
	slice := func(svc string, eps ...[2]string) discoveryv1.EndpointSlice {
		es := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: func() *int32 { p := int32(8080); return &p }()}},
		}
		for _, e := range eps {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{e[0]}, NodeName: ptr(e[1]), Conditions: discoveryv1.EndpointConditions{Ready: &tru}})
		}
		return es
	}
	in := &snapshot.Input{
		VIPs:     []v1alpha1.ProxyVIP{{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.ProxyVIPSpec{Address: "10.9.0.1", Mode: v1alpha1.VIPModeL2ARP}}},
		Services: []corev1.Service{svc("global", false), svc("local", true)},
		EndpointSlices: []discoveryv1.EndpointSlice{
			slice("global", [2]string{"10.1.0.1", "node-d"}, [2]string{"10.1.0.2", "node-e"}),
			slice("local", [2]string{"10.1.1.1", "node-c"}),
		},
		Decisions: &snapshot.Decisions{
			Addresses: map[string][]netip.Addr{
				snapshot.ServiceVIPName("shop", "global"): {netip.MustParseAddr("10.9.0.2")},
				snapshot.ServiceVIPName("shop", "local"):  {netip.MustParseAddr("10.9.0.3")},
			},
			Assignments: map[string]snapshot.Assignment{
				"web": {Active: "node-a", Standbys: []string{"node-b"}},
				snapshot.ServiceVIPName("shop", "global"): {Active: "node-b"},
			},
			EndpointHealth: map[string]bool{},
		},
	}
	w := &world{in: in, services: servedServices(in, false)}
	involved := involvedNodes(w)
	want := map[string]involvement{"node-a": assigned, "node-b": assigned, "node-c": localEndpoints}
	if !maps.Equal(involved, want) {
		t.Fatalf("involved nodes %v, want node-a, node-b assigned and node-c with a Local endpoint", involved)
	}
	c := &Controller{opts: Options{ServeClasslessServices: true}}
	shared := []snapshot.Node{{Name: "node-a"}, {Name: "node-b", Labels: map[string]string{"zone": "b"}}}
	snaps, sh := snapshot.BuildShared(in, c.buildOptions(noNode, nil), shared)
	same := func(node string, got, full *pb.ConfigSnapshot) {
		t.Helper()
		if got.GetContentHash() != full.GetContentHash() || !proto.Equal(got.GetCluster(), full.GetCluster()) || !proto.Equal(got.GetNode(), full.GetNode()) {
			t.Errorf("%s: the shared build differs from a full one", node)
		}
	}
	// Nodes that serve nothing take the base as it is.
	for _, node := range []string{"node-d", "node-e", "node-z"} {
		full, _ := snapshot.Build(in, c.buildOptions(node, nil))
		same(node, sh.ForNode(node), full)
	}
	// Assigned nodes add their node part to the shared cluster part.
	for i, n := range shared {
		full, _ := snapshot.Build(in, c.buildOptions(n.Name, n.Labels))
		same(n.Name, snaps[i], full)
		if len(full.GetNode().GetVips()) == 0 {
			t.Errorf("%s serves no VIP: the node part proves nothing", n.Name)
		}
	}
	// And it would be wrong for node-c, whose cluster part is its own.
	full, _ := snapshot.Build(in, c.buildOptions("node-c", nil))
	if proto.Equal(full.GetCluster(), sh.ForNode("node-z").GetCluster()) {
		t.Error("node-c's Local endpoints do not change its cluster part: the test proves nothing")
	}
}

// TestFailingEndpointsElectorate: a verdict needs more than half of the
// Ready nodes with an agent, whether or not their Lease is fresh at the
// moment; stale Leases' reports do not count.
func TestFailingEndpointsElectorate(t *testing.T) {
	lease := func(failing string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if failing != "" {
			l.Annotations["novaedge.io/probe-failures"] = failing
		}
		return l
	}
	tests := []struct {
		name    string
		fresh   []string // eligible nodes (fresh, healthy)
		agents  int      // Ready nodes with a Lease
		reports map[string]string
		want    []string
	}{
		{"two of three", []string{"a", "b", "c"}, 3, map[string]string{"a": "10.0.0.1:80", "b": "10.0.0.1:80"}, []string{"10.0.0.1:80"}},
		{"one of three", []string{"a", "b", "c"}, 3, map[string]string{"a": "10.0.0.1:80"}, nil},
		{"one of three, the two others' Leases late", []string{"a"}, 3, map[string]string{"a": "10.0.0.1:80"}, nil},
		{"a single node decides alone", []string{"a"}, 1, map[string]string{"a": "10.0.0.1:80"}, []string{"10.0.0.1:80"}},
		{"a stale report does not count", []string{"a", "b"}, 3, map[string]string{"a": "10.0.0.1:80", "c": "10.0.0.1:80"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{agentLeases: map[string]*coordinationv1.Lease{}}
			for n, f := range tt.reports {
				w.agentLeases[n] = lease(f)
			}
			got := failingEndpoints(w, eligibility{order: tt.fresh, agents: tt.agents})
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tt.want) {
				t.Errorf("failing = %v, want %v", keys, tt.want)
			}
		})
	}
}
