package snapshot

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Fixtures, joined into one input per test case.
const (
	svcPools = `
apiVersion: novaedge.io/v1alpha1
kind: ProxyIPPool
metadata: {name: lb-pool}
spec: {cidrs: [10.50.0.0/24]}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyIPPool
metadata: {name: other-pool}
spec: {cidrs: [10.60.0.0/24]}
`
	// web: two named ports; its pods moved from targetPort 8080 to 8081
	// for http, so the slices disagree on the number: each endpoint keeps
	// its own slice's port, as kube-proxy does.
	svcWeb = `
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  annotations: {novaedge.io/loadBalancerIPs: 10.50.0.10}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: http}
    - {name: https, port: 443, targetPort: 8443}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-old
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
  - {name: http, port: 8080, protocol: TCP}
  - {name: https, port: 8443, protocol: TCP}
endpoints:
  - {addresses: [10.244.1.10], nodeName: node-a, conditions: {ready: true}}
  - {addresses: [10.244.2.10], nodeName: node-b, conditions: {ready: true}}
  - {addresses: [10.244.2.11], nodeName: node-b, conditions: {ready: false, serving: true, terminating: true}}
  - {addresses: [10.244.1.11], nodeName: node-a, conditions: {ready: false, serving: false, terminating: true}}
  - {addresses: [10.244.1.12], nodeName: node-a, conditions: {ready: false}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-new
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
  - {name: http, port: 8081, protocol: TCP}
endpoints:
  - {addresses: [10.244.3.10], nodeName: node-c, conditions: {ready: true}}
`
	// local: externalTrafficPolicy Local with endpoints on two nodes.
	svcLocal = `
apiVersion: v1
kind: Service
metadata:
  name: local
  namespace: shop
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: local}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: local-1
  namespace: shop
  labels: {kubernetes.io/service-name: local}
addressType: IPv4
ports: [{name: "", port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.20], nodeName: node-a, conditions: {ready: true}}
  - {addresses: [10.244.1.21], nodeName: node-a, conditions: {ready: true}}
  - {addresses: [10.244.2.20], nodeName: node-b, conditions: {ready: true}}
`
	// dns-tcp and dns-udp share an address under key "dns", from two
	// namespaces; dns-clash wants the same key and a port already taken.
	svcDNS = `
apiVersion: v1
kind: Service
metadata:
  name: dns-tcp
  namespace: infra
  creationTimestamp: "2024-01-01T00:00:00Z"
  annotations: {novaedge.io/allow-shared-ip: dns, novaedge.io/address-pool: lb-pool, novaedge.io/loadBalancerIPs: 10.50.0.53}
spec:
  type: LoadBalancer
  selector: {app: dns}
  ports: [{name: dns, port: 53, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata:
  name: dns-udp
  namespace: edge
  creationTimestamp: "2024-01-02T00:00:00Z"
  annotations: {novaedge.io/allow-shared-ip: dns, novaedge.io/address-pool: lb-pool}
spec:
  type: LoadBalancer
  selector: {app: dns}
  ports: [{name: dns, port: 53, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-tcp-1
  namespace: infra
  labels: {kubernetes.io/service-name: dns-tcp}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: TCP}]
endpoints:
  - {addresses: [10.244.5.1], nodeName: node-a, conditions: {ready: true}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-udp-1
  namespace: edge
  labels: {kubernetes.io/service-name: dns-udp}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}]
endpoints:
  - {addresses: [10.244.6.1], nodeName: node-b, conditions: {ready: true}}
`
	svcDNSClash = `
apiVersion: v1
kind: Service
metadata:
  name: dns-clash
  namespace: infra
  creationTimestamp: "2024-01-03T00:00:00Z"
  annotations: {novaedge.io/allow-shared-ip: dns, novaedge.io/address-pool: lb-pool, novaedge.io/loadBalancerIPs: 10.50.0.53}
spec:
  type: LoadBalancer
  ports: [{port: 53, protocol: TCP}, {port: 853, protocol: TCP}]
`
)

func svcInput(t *testing.T, docs ...string) *Input {
	t.Helper()
	return parseInput(t, t.Name(), []byte(strings.Join(docs, "\n---\n")))
}

func diagStrings(t *testing.T, s *pb.ConfigSnapshot) []string {
	t.Helper()
	var out []string
	for _, d := range s.GetDiagnostics() {
		out = append(out, DiagnosticFromProto(d).String())
	}
	return out
}

func findBackend(s *pb.ConfigSnapshot, name string) *pb.Backend {
	for _, b := range s.GetCluster().GetBackends() {
		if b.GetName() == name {
			return b
		}
	}
	return nil
}

func findVIP(s *pb.ConfigSnapshot, name string) *pb.VIP {
	for _, v := range s.GetCluster().GetVips() {
		if v.GetName() == name {
			return v
		}
	}
	return nil
}

func findNodeVIP(s *pb.ConfigSnapshot, name string) *pb.VIPAssignment {
	for _, v := range s.GetNode().GetVips() {
		if v.GetVip() == name {
			return v
		}
	}
	return nil
}

func planFor(s *pb.ConfigSnapshot, listener string) []*pb.PlanEntry {
	var out []*pb.PlanEntry
	for _, e := range s.GetCluster().GetPlan() {
		if e.GetListener() == listener {
			out = append(out, e)
		}
	}
	return out
}

func listenerNames(s *pb.ConfigSnapshot) []string {
	var out []string
	for _, l := range s.GetCluster().GetListeners() {
		out = append(out, l.GetName())
	}
	return out
}

func ep(addr string, port uint32, state pb.EndpointState, node string) *pb.Endpoint {
	return &pb.Endpoint{Address: addr, Port: port, Weight: 1, State: state, Node: node}
}

const (
	healthy   = pb.EndpointState_ENDPOINT_STATE_HEALTHY
	unhealthy = pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
	draining  = pb.EndpointState_ENDPOINT_STATE_DRAINING
)

var natSNAT = &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT}

// A Service becomes a VIP, an L4 listener, route and backend per port, and
// FAST plan entries; its endpoints come from the EndpointSlices with the
// target port resolved per slice, and their conditions decide their state.
func TestServiceTranslation(t *testing.T) {
	s, _ := Build(svcInput(t, svcPools, svcWeb), Options{Node: Node{Name: "node-a"}, ClusterComplete: true})
	if d := diagStrings(t, s); len(d) > 0 {
		t.Errorf("diagnostics: %q", d)
	}
	const vip = "Service/shop/web"
	wantVIP := &pb.VIP{Name: vip, Mode: pb.VIPMode_VIP_MODE_L2ARP, Addresses: []string{"10.50.0.10"}, Ports: []uint32{80, 443}, Forwarding: natSNAT}
	if diff := cmp.Diff(wantVIP, findVIP(s, vip), protocmp.Transform()); diff != "" {
		t.Errorf("VIP (-want +got):\n%s", diff)
	}
	if got, want := ServiceVIPName("shop", "web"), vip; got != want {
		t.Errorf("ServiceVIPName = %q, want %q", got, want)
	}
	wantNode := &pb.VIPAssignment{Vip: vip, Mode: pb.VIPMode_VIP_MODE_L2ARP, Role: pb.VIPRole_VIP_ROLE_ACTIVE, Addresses: []string{"10.50.0.10"}, ActiveNode: "node-a"}
	if diff := cmp.Diff(wantNode, findNodeVIP(s, vip), protocmp.Transform()); diff != "" {
		t.Errorf("node assignment (-want +got):\n%s", diff)
	}

	httpEPs := []*pb.Endpoint{
		ep("10.244.1.10", 8080, healthy, "node-a"),
		ep("10.244.1.12", 8080, unhealthy, "node-a"), // not ready
		ep("10.244.2.10", 8080, healthy, "node-b"),
		ep("10.244.2.11", 8080, draining, "node-b"), // terminating, still serving
		ep("10.244.3.10", 8081, healthy, "node-c"),  // the other slice's port
		// 10.244.1.11 is terminating and no longer serving: dropped.
	}
	httpsEPs := []*pb.Endpoint{
		ep("10.244.1.10", 8443, healthy, "node-a"),
		ep("10.244.1.12", 8443, unhealthy, "node-a"),
		ep("10.244.2.10", 8443, healthy, "node-b"),
		ep("10.244.2.11", 8443, draining, "node-b"),
	}
	for _, tc := range []struct {
		name string
		port uint32
		eps  []*pb.Endpoint
	}{{"Service/shop/web/tcp-80", 80, httpEPs}, {"Service/shop/web/tcp-443", 443, httpsEPs}} {
		t.Run(tc.name, func(t *testing.T) {
			wantBackend := &pb.Backend{Name: tc.name, Protocol: "TCP", LbPolicy: pb.LBPolicy_LB_POLICY_ROUND_ROBIN, ConnectTimeoutMs: 5000, Endpoints: tc.eps}
			if diff := cmp.Diff(wantBackend, findBackend(s, tc.name), protocmp.Transform()); diff != "" {
				t.Errorf("backend (-want +got):\n%s", diff)
			}
			var l *pb.Listener
			for _, x := range s.GetCluster().GetListeners() {
				if x.GetName() == tc.name {
					l = x
				}
			}
			wantListener := &pb.Listener{Name: tc.name, Gateway: vip, Vip: vip, Addresses: []string{"10.50.0.10"}, Port: tc.port, Protocol: pb.Protocol_PROTOCOL_TCP, Routes: []string{tc.name}}
			if diff := cmp.Diff(wantListener, l, protocmp.Transform()); diff != "" {
				t.Errorf("listener (-want +got):\n%s", diff)
			}
			var rt *pb.Route
			for _, x := range s.GetCluster().GetRoutes() {
				if x.GetName() == tc.name {
					rt = x
				}
			}
			wantRoute := &pb.Route{Name: tc.name, Kind: pb.RouteKind_ROUTE_KIND_TCP, Source: "Service/shop/web", Listeners: []string{tc.name},
				Rules: []*pb.RouteRule{{Backends: []*pb.WeightedBackend{{Backend: tc.name, Weight: 1}}}}}
			if diff := cmp.Diff(wantRoute, rt, protocmp.Transform()); diff != "" {
				t.Errorf("route (-want +got):\n%s", diff)
			}
			plan := planFor(s, tc.name)
			if len(plan) != 1 {
				t.Fatalf("plan entries %v, want one", plan)
			}
			want := &pb.PlanEntry{
				Vip: vip, Address: "10.50.0.10", Port: tc.port, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP,
				Path: pb.DataPath_DATA_PATH_FAST, Listener: tc.name, Endpoints: tc.eps, Forwarding: natSNAT,
			}
			if diff := cmp.Diff(want, plan[0], protocmp.Transform(), protocmp.IgnoreFields(&pb.PlanEntry{}, "reasons")); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// Protocols: TCP and UDP on one port are two listeners and two plan
// entries; SCTP is reported and left out, the other ports served.
func TestServiceProtocols(t *testing.T) {
	in := svcInput(t, `
apiVersion: v1
kind: Service
metadata:
  name: mixed
  namespace: ns
  annotations: {novaedge.io/loadBalancerIPs: 10.50.0.5}
spec:
  type: LoadBalancer
  ports:
    - {name: dns-tcp, port: 53, protocol: TCP}
    - {name: dns-udp, port: 53, protocol: UDP}
    - {name: sig, port: 3868, protocol: SCTP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: mixed-1
  namespace: ns
  labels: {kubernetes.io/service-name: mixed}
addressType: IPv4
ports:
  - {name: dns-tcp, port: 5353, protocol: TCP}
  - {name: dns-udp, port: 5353, protocol: UDP}
  - {name: sig, port: 3868, protocol: SCTP}
endpoints:
  - {addresses: [10.1.0.1]}
`)
	s, _ := Build(in, Options{Node: Node{Name: "n"}})
	wantDiags := []string{`warning: Service ns/mixed: spec.ports[2].protocol: SCTP is not supported (TCP and UDP are): port 3868 is not served`}
	if diff := cmp.Diff(wantDiags, diagStrings(t, s)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Service/ns/mixed/tcp-53", "Service/ns/mixed/udp-53"}, listenerNames(s)); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	var got []string
	for _, e := range s.GetCluster().GetPlan() {
		got = append(got, e.GetProtocol().String()+" "+e.GetPath().String()+" "+e.GetEndpoints()[0].GetAddress())
	}
	want := []string{"L4_PROTOCOL_TCP DATA_PATH_FAST 10.1.0.1", "L4_PROTOCOL_UDP DATA_PATH_FAST 10.1.0.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if p := findBackend(s, "Service/ns/mixed/udp-53").GetEndpoints()[0].GetPort(); p != 5353 {
		t.Errorf("UDP endpoint port %d, want 5353 (the slice's UDP port, not its TCP one)", p)
	}
}

// Where the address comes from, and what happens without one.
func TestServiceAddresses(t *testing.T) {
	svc := func(extra string) string {
		return `
apiVersion: v1
kind: Service
metadata:
  name: s
  namespace: ns
` + extra + `
  ports: [{port: 80}]`
	}
	const vip = "Service/ns/s"
	tests := []struct {
		name      string
		docs      []string
		decisions *Decisions
		wantAddrs []string // nil: not served
		wantDiags []string
	}{
		{
			name:      "annotation",
			docs:      []string{svc("  annotations: {novaedge.io/loadBalancerIPs: \"10.50.0.7, 2001:db8::7\"}\nspec:\n  type: LoadBalancer\n  ipFamilies: [IPv4, IPv6]")},
			wantAddrs: []string{"10.50.0.7", "2001:db8::7"},
		},
		{
			name:      "spec.loadBalancerIP",
			docs:      []string{svc("spec:\n  type: LoadBalancer\n  loadBalancerIP: 10.50.0.8")},
			wantAddrs: []string{"10.50.0.8"},
		},
		{
			name:      "annotation wins over spec.loadBalancerIP",
			docs:      []string{svc("  annotations: {novaedge.io/loadBalancerIPs: 10.50.0.7}\nspec:\n  type: LoadBalancer\n  loadBalancerIP: 10.50.0.8")},
			wantAddrs: []string{"10.50.0.7"},
			wantDiags: []string{`warning: Service ns/s: spec.loadBalancerIP: ignored: the novaedge.io/loadBalancerIPs annotation takes precedence`},
		},
		{
			name:      "status in standalone",
			docs:      []string{svc("spec:\n  type: LoadBalancer") + "\nstatus:\n  loadBalancer:\n    ingress: [{ip: 10.50.0.9}]"},
			wantAddrs: []string{"10.50.0.9"},
		},
		{
			name:      "IPv6 status without ipFamilies",
			docs:      []string{svc("spec:\n  type: LoadBalancer") + "\nstatus:\n  loadBalancer:\n    ingress: [{ip: \"2001:db8::9\"}, {hostname: lb.example}]"},
			wantAddrs: []string{"2001:db8::9"},
		},
		{
			name: "no address in standalone",
			docs: []string{svc("spec:\n  type: LoadBalancer")},
			wantDiags: []string{
				`error: Service ns/s: metadata.annotations[novaedge.io/loadBalancerIPs]: no address: without a controller to allocate one, set the novaedge.io/loadBalancerIPs annotation (or status.loadBalancer.ingress)`,
			},
		},
		{
			name:      "decided by the controller",
			docs:      []string{svc("  annotations: {novaedge.io/address-pool: lb-pool}\nspec:\n  type: LoadBalancer") + "\nstatus:\n  loadBalancer:\n    ingress: [{ip: 10.50.0.99}]"},
			decisions: &Decisions{Addresses: map[string][]netip.Addr{vip: {netip.MustParseAddr("10.50.0.11")}}, Assignments: map[string]Assignment{vip: {Active: "node-a"}}},
			wantAddrs: []string{"10.50.0.11"},
		},
		{
			name:      "not decided yet",
			docs:      []string{svc("spec:\n  type: LoadBalancer\n  loadBalancerIP: 10.50.0.8")},
			decisions: &Decisions{},
			wantDiags: []string{`warning: Service ns/s: status.loadBalancer.ingress: no address allocated yet; the Service is served once the controller assigns one`},
		},
		{
			name: "pool not found",
			docs: []string{svc("  annotations: {novaedge.io/address-pool: nope, novaedge.io/loadBalancerIPs: 10.50.0.7}\nspec:\n  type: LoadBalancer")},
			wantDiags: []string{
				`error: Service ns/s: metadata.annotations[novaedge.io/address-pool]: ProxyIPPool "nope" not found`,
			},
		},
		{
			name: "address outside its pool",
			docs: []string{svc("  annotations: {novaedge.io/address-pool: other-pool, novaedge.io/loadBalancerIPs: 10.50.0.7}\nspec:\n  type: LoadBalancer")},
			wantDiags: []string{
				`error: Service ns/s: metadata.annotations[novaedge.io/loadBalancerIPs]: address 10.50.0.7 is outside ProxyIPPool other-pool`,
			},
		},
		{
			name: "invalid and doubled addresses",
			docs: []string{svc("  annotations: {novaedge.io/loadBalancerIPs: \"10.50.0.7,10.50.0.8,nope\"}\nspec:\n  type: LoadBalancer")},
			wantDiags: []string{
				`error: Service ns/s: metadata.annotations[novaedge.io/loadBalancerIPs]: invalid IP address "nope"`,
				`error: Service ns/s: metadata.annotations[novaedge.io/loadBalancerIPs]: two IPv4 addresses (10.50.0.7 and 10.50.0.8): a Service has at most one address per family`,
			},
		},
		{
			name: "family not asked for",
			docs: []string{svc("  annotations: {novaedge.io/loadBalancerIPs: \"2001:db8::7\"}\nspec:\n  type: LoadBalancer\n  ipFamilies: [IPv4]")},
			wantDiags: []string{
				`error: Service ns/s: metadata.annotations[novaedge.io/loadBalancerIPs]: address 2001:db8::7 is IPv6, but the Service's spec.ipFamilies are [IPv4]`,
			},
		},
		{
			name: "address of a ProxyVIP",
			docs: []string{svc("spec:\n  type: LoadBalancer\n  loadBalancerIP: 10.50.0.8"), `
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: admin}
spec: {address: 10.50.0.8, mode: L2ARP}`},
			wantDiags: []string{
				`warning: ProxyVIP admin: spec.address: address 10.50.0.8 lies inside ProxyIPPool lb-pool; it is reserved there and never auto-assigned (add poolRef to make that explicit)`,
				`error: Service ns/s: spec.loadBalancerIP: address 10.50.0.8 is already used by ProxyVIP admin, which keeps it`,
			},
		},
		{
			name: "source ranges fail closed",
			docs: []string{svc("spec:\n  type: LoadBalancer\n  loadBalancerIP: 10.50.0.8\n  loadBalancerSourceRanges: [192.0.2.0/24]")},
			wantDiags: []string{
				`error: Service ns/s: spec.loadBalancerSourceRanges: not supported yet: NovaEdge cannot limit which clients reach a Service, so it is not served rather than opened to every source`,
			},
		},
		{
			name: "no servable port",
			docs: []string{`
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
spec:
  type: LoadBalancer
  loadBalancerIP: 10.50.0.8
  ports: [{port: 9, protocol: SCTP}]`},
			wantDiags: []string{
				`error: Service ns/s: spec.ports: no TCP or UDP port to serve`,
				`warning: Service ns/s: spec.ports[0].protocol: SCTP is not supported (TCP and UDP are): port 9 is not served`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := svcInput(t, append([]string{svcPools}, tc.docs...)...)
			in.Decisions = tc.decisions
			s, _ := Build(in, Options{Node: Node{Name: "node-a"}, ClusterComplete: true})
			var got []string
			for _, d := range diagStrings(t, s) {
				if !strings.Contains(d, "no healthy endpoint") { // no EndpointSlices here
					got = append(got, d)
				}
			}
			if diff := cmp.Diff(tc.wantDiags, got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
			v := findVIP(s, vip)
			if tc.wantAddrs == nil {
				if v != nil || len(s.GetCluster().GetListeners()) > 0 || len(s.GetCluster().GetPlan()) > 0 || findNodeVIP(s, vip) != nil {
					t.Errorf("the Service is served: %v", s.GetCluster())
				}
				return
			}
			if diff := cmp.Diff(tc.wantAddrs, v.GetAddresses()); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			if got, want := len(s.GetCluster().GetPlan()), len(tc.wantAddrs); got != want {
				t.Errorf("%d plan entries, want one per address (%d)", got, want)
			}
			if findNodeVIP(s, vip) == nil {
				t.Error("node-a does not serve the VIP")
			}
		})
	}
}

// externalTrafficPolicy Local: each node's snapshot balances over the
// endpoints on that node only and keeps the client's address; that is the
// only difference between the nodes' cluster parts.
func TestServiceExternalTrafficPolicyLocal(t *testing.T) {
	const (
		vip  = "Service/shop/local"
		port = "Service/shop/local/tcp-80"
	)
	in := svcInput(t, svcPools, svcLocal, svcWeb)
	in.Decisions = &Decisions{
		Addresses: map[string][]netip.Addr{
			vip:                {netip.MustParseAddr("10.50.0.20")},
			"Service/shop/web": {netip.MustParseAddr("10.50.0.10")},
		},
		Assignments: map[string]Assignment{
			vip:                {Active: "node-a", Standbys: []string{"node-b"}},
			"Service/shop/web": {Active: "node-b", Standbys: []string{"node-a"}},
		},
	}
	// The leader persisted a lineage under both keys (a Service may have
	// changed its policy since): only the cluster-wide entry carries it.
	lin := &pb.MaglevLineage{Size: 251, Backends: []string{"10.244.1.10:8080"}, Slots: make([]byte, 32)}
	in.Decisions.MaglevLineage = map[string]*pb.MaglevLineage{"10.50.0.20:80/tcp": lin, "10.50.0.10:80/tcp": lin}
	build := func(node string) *pb.ConfigSnapshot {
		s, _ := Build(in, Options{Node: Node{Name: node}, ClusterComplete: true})
		return s
	}
	a, b := build("node-a"), build("node-b")
	for _, s := range []*pb.ConfigSnapshot{a, b} {
		local, web := planFor(s, port), planFor(s, "Service/shop/web/tcp-80")
		if len(local) != 1 || !local[0].GetNodeLocal() || local[0].GetLineage() != nil {
			t.Errorf("%s: Local entry %v: want node_local and no lineage", s.GetNode().GetNodeName(), local)
		}
		if len(web) != 1 || web[0].GetNodeLocal() || !proto.Equal(web[0].GetLineage(), lin) || PlanKey(web[0]) != "10.50.0.10:80/tcp" {
			t.Errorf("%s: Cluster entry %v: want the persisted lineage", s.GetNode().GetNodeName(), web)
		}
	}
	keep := &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT, PreserveClientIp: true}
	for _, tc := range []struct {
		s    *pb.ConfigSnapshot
		want []*pb.Endpoint
	}{
		{a, []*pb.Endpoint{ep("10.244.1.20", 8080, healthy, "node-a"), ep("10.244.1.21", 8080, healthy, "node-a")}},
		{b, []*pb.Endpoint{ep("10.244.2.20", 8080, healthy, "node-b")}},
	} {
		node := tc.s.GetNode().GetNodeName()
		if diff := cmp.Diff(tc.want, findBackend(tc.s, port).GetEndpoints(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: backend endpoints (-want +got):\n%s", node, diff)
		}
		plan := planFor(tc.s, port)
		if len(plan) != 1 || plan[0].GetPath() != pb.DataPath_DATA_PATH_FAST {
			t.Fatalf("%s: plan %v, want one FAST entry", node, plan)
		}
		if diff := cmp.Diff(tc.want, plan[0].GetEndpoints(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: table input (-want +got):\n%s", node, diff)
		}
		if diff := cmp.Diff(keep, plan[0].GetForwarding(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: forwarding (-want +got):\n%s", node, diff)
		}
		if diff := cmp.Diff(keep, findVIP(tc.s, vip).GetForwarding(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: VIP forwarding (-want +got):\n%s", node, diff)
		}
	}
	if got := findNodeVIP(b, vip).GetRole(); got != pb.VIPRole_VIP_ROLE_STANDBY {
		t.Errorf("node-b role %s, want STANDBY", got)
	}
	// Everything else is identical: strip the Local Service's backend and
	// table inputs and compare the bytes.
	strip := func(s *pb.ConfigSnapshot) []byte {
		c := proto.Clone(s.GetCluster()).(*pb.ClusterConfig)
		c.Backends = slices.DeleteFunc(c.Backends, func(x *pb.Backend) bool { return x.GetName() == port })
		for _, e := range c.Plan {
			if e.GetListener() == port {
				e.Endpoints = nil
			}
		}
		return ClusterBytes(&pb.ConfigSnapshot{Cluster: c})
	}
	if bytes.Equal(ClusterBytes(a), ClusterBytes(b)) {
		t.Error("cluster parts are equal: node-local endpoints must differ")
	}
	if !bytes.Equal(strip(a), strip(b)) {
		t.Error("cluster parts differ beyond the Local Service's endpoints")
	}
	if !proto.Equal(findBackend(a, "Service/shop/web/tcp-80"), findBackend(b, "Service/shop/web/tcp-80")) {
		t.Error("an externalTrafficPolicy Cluster Service has different backends on two nodes")
	}

	t.Run("preserve-client-ip false is overridden", func(t *testing.T) {
		in := svcInput(t, strings.Replace(svcLocal, "  namespace: shop\n", "  namespace: shop\n  annotations: {novaedge.io/preserve-client-ip: \"false\", novaedge.io/loadBalancerIPs: 10.50.0.20}\n", 1))
		s, _ := Build(in, Options{Node: Node{Name: "node-a"}})
		want := []string{`warning: Service shop/local: metadata.annotations[novaedge.io/preserve-client-ip]: ignored: externalTrafficPolicy Local keeps the client's address (NAT without SNAT)`}
		if diff := cmp.Diff(want, diagStrings(t, s)); diff != "" {
			t.Errorf("diagnostics (-want +got):\n%s", diff)
		}
		if !findVIP(s, vip).GetForwarding().GetPreserveClientIp() {
			t.Error("client address not kept")
		}
	})

	t.Run("standalone node without a local endpoint does not serve it", func(t *testing.T) {
		in := svcInput(t, strings.Replace(svcLocal, "  namespace: shop\n", "  namespace: shop\n  annotations: {novaedge.io/loadBalancerIPs: 10.50.0.20}\n", 1))
		s, _ := Build(in, Options{Node: Node{Name: "node-z"}})
		want := []string{`warning: Service shop/local: spec.externalTrafficPolicy: Local, and no ready endpoint runs on node node-z: the node does not announce the address (its traffic would have nowhere to go)`}
		if diff := cmp.Diff(want, diagStrings(t, s)); diff != "" {
			t.Errorf("diagnostics (-want +got):\n%s", diff)
		}
		if findVIP(s, vip) != nil || len(s.GetCluster().GetPlan()) != 0 || len(s.GetNode().GetVips()) != 0 {
			t.Errorf("served on node-z: %v", s)
		}
		s, _ = Build(in, Options{Node: Node{Name: "node-b"}})
		if findNodeVIP(s, vip).GetRole() != pb.VIPRole_VIP_ROLE_ACTIVE {
			t.Errorf("node-b has a local endpoint and must serve: %v", s.GetNode())
		}
	})
}

// Services with one sharing key share one VIP when their ports differ;
// a later Service whose port collides, or that disagrees on what must be
// shared, is reported and left out while the others stay.
func TestServiceSharedIP(t *testing.T) {
	const vip = "Service/shared:dns"
	tests := []struct {
		name          string
		docs          []string
		wantListeners []string
		wantDiags     []string
	}{
		{
			name:          "disjoint ports share",
			docs:          []string{svcDNS},
			wantListeners: []string{"Service/edge/dns-udp/udp-53", "Service/infra/dns-tcp/tcp-53"},
		},
		{
			name:          "a colliding port keeps the newer Service out",
			docs:          []string{svcDNS, svcDNSClash},
			wantListeners: []string{"Service/edge/dns-udp/udp-53", "Service/infra/dns-tcp/tcp-53"},
			wantDiags: []string{
				`error: Service infra/dns-clash: spec.ports[0]: cannot share an address with Service infra/dns-tcp under key "dns": TCP port 53 is already served there by Service infra/dns-tcp; the older Services keep the address and this one is not served`,
			},
		},
		{
			name:          "the older Service keeps the port whatever the order of the names",
			docs:          []string{strings.Replace(svcDNS, "2024-01-01", "2024-01-05", 1), svcDNSClash},
			wantListeners: []string{"Service/edge/dns-udp/udp-53", "Service/infra/dns-clash/tcp-53", "Service/infra/dns-clash/tcp-853"},
			wantDiags: []string{
				`error: Service infra/dns-tcp: spec.ports[0]: cannot share an address with Service edge/dns-udp under key "dns": TCP port 53 is already served there by Service infra/dns-clash; the older Services keep the address and this one is not served`,
			},
		},
		{
			name:          "different pools do not share",
			docs:          []string{strings.Replace(svcDNS, "novaedge.io/address-pool: lb-pool}", "novaedge.io/address-pool: other-pool}", 1)},
			wantListeners: []string{"Service/infra/dns-tcp/tcp-53"},
			wantDiags: []string{
				`error: Service edge/dns-udp: metadata.annotations[novaedge.io/address-pool]: cannot share an address with Service infra/dns-tcp under key "dns": it asks for pool "other-pool", they for "lb-pool"; the older Services keep the address and this one is not served`,
			},
		},
		{
			name:          "different traffic policies do not share",
			docs:          []string{strings.Replace(svcDNS, "  selector: {app: dns}\n  ports: [{name: dns, port: 53, protocol: UDP}]", "  selector: {app: dns}\n  externalTrafficPolicy: Local\n  ports: [{name: dns, port: 53, protocol: UDP}]", 1)},
			wantListeners: []string{"Service/infra/dns-tcp/tcp-53"},
			wantDiags: []string{
				`error: Service edge/dns-udp: spec.externalTrafficPolicy: cannot share an address with Service infra/dns-tcp under key "dns": externalTrafficPolicy differs (the nodes announcing the address depend on it); the older Services keep the address and this one is not served`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Build(svcInput(t, append([]string{svcPools}, tc.docs...)...), Options{Node: Node{Name: "node-a"}, ClusterComplete: true})
			var diags []string
			for _, d := range diagStrings(t, s) {
				if !strings.Contains(d, "no healthy endpoint") {
					diags = append(diags, d)
				}
			}
			if diff := cmp.Diff(tc.wantDiags, diags); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantListeners, listenerNames(s)); diff != "" {
				t.Errorf("listeners (-want +got):\n%s", diff)
			}
			vips := s.GetCluster().GetVips()
			if len(vips) != 1 || vips[0].GetName() != vip || !slices.Equal(vips[0].GetAddresses(), []string{"10.50.0.53"}) {
				t.Fatalf("VIPs %v, want one %s on 10.50.0.53", vips, vip)
			}
			for _, l := range s.GetCluster().GetListeners() {
				if l.GetVip() != vip || !slices.Equal(l.GetAddresses(), []string{"10.50.0.53"}) {
					t.Errorf("listener %s is on %s %v, want the shared VIP", l.GetName(), l.GetVip(), l.GetAddresses())
				}
			}
			if len(s.GetNode().GetVips()) != 1 {
				t.Errorf("node VIPs %v, want the one shared VIP", s.GetNode().GetVips())
			}
		})
	}
	if got := SharedVIPName("dns"); got != vip {
		t.Errorf("SharedVIPName = %q, want %q", got, vip)
	}
}

// Which Services are NovaEdge's: type LoadBalancer with its class, or no
// class unless classless Services are left to another implementation.
func TestServiceClassSelection(t *testing.T) {
	svc := func(name, class, typ string) string {
		s := "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\n  namespace: ns\n  annotations: {novaedge.io/loadBalancerIPs: 10.50.0." + string(rune('1'+len(name)%9)) + "}\nspec:\n  type: " + typ + "\n  ports: [{port: 80}]\n"
		if class != "" {
			s += "  loadBalancerClass: " + class + "\n"
		}
		return s
	}
	in := svcInput(t,
		svc("ours", v1alpha1.LoadBalancerClass, "LoadBalancer"),
		svc("classless", "", "LoadBalancer"),
		svc("theirs", "example.com/lb", "LoadBalancer"),
		svc("nodeport", "", "NodePort"),
	)
	tests := []struct {
		name string
		skip bool
		want []string
	}{
		{name: "classless served", want: []string{"Service/ns/classless", "Service/ns/ours"}},
		{name: "classless skipped", skip: true, want: []string{"Service/ns/ours"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Node: Node{Name: "n"}, SkipClasslessServices: tc.skip}
			s, _ := Build(in, opts)
			var got []string
			for _, v := range s.GetCluster().GetVips() {
				got = append(got, v.GetName())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("VIPs (-want +got):\n%s", diff)
			}
			var served []string
			for _, i := range ServedServices(in, opts) {
				served = append(served, i.VIP)
			}
			if diff := cmp.Diff(tc.want, served); diff != "" {
				t.Errorf("ServedServices disagrees with Build (-want +got):\n%s", diff)
			}
		})
	}
}

// ClientIP session affinity is carried to the plan (the fast path does not
// honour it yet, which is said) and to the backend as source-address
// hashing for the slow path.
func TestServiceSessionAffinity(t *testing.T) {
	base := `
apiVersion: v1
kind: Service
metadata:
  name: sticky
  namespace: ns
  annotations: {novaedge.io/loadBalancerIPs: 10.50.0.30}
spec:
  type: LoadBalancer
  ports: [{port: 80}]
`
	tests := []struct {
		name     string
		spec     string
		affinity pb.Affinity
		ttl      uint32
	}{
		{name: "none", spec: "", affinity: pb.Affinity_AFFINITY_NONE},
		{name: "ClientIP default timeout", spec: "  sessionAffinity: ClientIP\n", affinity: pb.Affinity_AFFINITY_CLIENT_IP, ttl: 10800},
		{name: "ClientIP with timeout", spec: "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}\n", affinity: pb.Affinity_AFFINITY_CLIENT_IP, ttl: 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Build(svcInput(t, base+tc.spec), Options{Node: Node{Name: "n"}})
			plan := planFor(s, "Service/ns/sticky/tcp-80")
			if len(plan) != 1 {
				t.Fatalf("plan %v", plan)
			}
			if plan[0].GetAffinity() != tc.affinity || plan[0].GetAffinityTimeoutS() != tc.ttl {
				t.Errorf("affinity %s/%d, want %s/%d", plan[0].GetAffinity(), plan[0].GetAffinityTimeoutS(), tc.affinity, tc.ttl)
			}
			be := findBackend(s, "Service/ns/sticky/tcp-80")
			warned := slices.ContainsFunc(diagStrings(t, s), func(d string) bool {
				return strings.Contains(d, "spec.sessionAffinity")
			})
			if warned {
				t.Errorf("a warning about session affinity, which both paths honour: %q", diagStrings(t, s))
			}
			if tc.affinity == pb.Affinity_AFFINITY_CLIENT_IP {
				if be.GetLbPolicy() != pb.LBPolicy_LB_POLICY_MAGLEV || !be.GetHashPolicy().GetSourceIp() {
					t.Errorf("backend %v, want Maglev over the source address", be)
				}
			} else if be.GetHashPolicy() != nil {
				t.Errorf("backend %v without affinity", be)
			}
		})
	}
}

// A ProxyGateway without vipRef holds its port on every address; a Service
// port that would need the same socket is refused rather than making the
// slow path fail to bind.
func TestServicePortHeldByWildcardGateway(t *testing.T) {
	in := svcInput(t, svcPools, svcWeb, `
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: any, namespace: shop}
spec:
  listeners: [{name: http, port: 80, protocol: HTTP}]`)
	s, _ := Build(in, Options{Node: Node{Name: "n"}})
	want := `error: Service shop/web: spec.ports[0]: tcp port 80 is held on every address by listener shop/any/http (a ProxyGateway without vipRef); not served`
	if !slices.Contains(diagStrings(t, s), want) {
		t.Errorf("missing %q in %q", want, diagStrings(t, s))
	}
	if diff := cmp.Diff([]string{"Service/shop/web/tcp-443", "shop/any/http"}, listenerNames(s)); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
}

// DSR cannot translate ports: the warning names the Service's annotation
// that chose DSR, not a ProxyVIP field.
func TestServiceDSRPortWarning(t *testing.T) {
	in := svcInput(t, strings.Replace(svcLocal, "  namespace: shop\n", "  namespace: shop\n  annotations: {novaedge.io/forwarding-mode: DSR, novaedge.io/loadBalancerIPs: 10.50.0.20}\n", 1))
	s, _ := Build(in, Options{Node: Node{Name: "node-b"}})
	want := []string{
		`warning: Service shop/local: metadata.annotations[novaedge.io/forwarding-mode]: listener Service/shop/local/tcp-80: endpoint 10.244.2.20:8080 of backend Service/shop/local/tcp-80 has port 8080, but DSR cannot rewrite ports: packets reach the backend on the listener's port 80, so it must listen there too (or use mode NAT)`,
	}
	if diff := cmp.Diff(want, diagStrings(t, s)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
	dsr := &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_DSR, Encapsulation: pb.Encapsulation_ENCAPSULATION_IPIP}
	if diff := cmp.Diff(dsr, planFor(s, "Service/shop/local/tcp-80")[0].GetForwarding(), protocmp.Transform()); diff != "" {
		t.Errorf("forwarding (-want +got):\n%s", diff)
	}
}

// ServedServices gives the controller the build's own view of each
// Service: VIP name, pool, requested addresses, sharing, traffic policy,
// ports, endpoint nodes and problems.
func TestServedServices(t *testing.T) {
	in := svcInput(t, svcPools, svcWeb, svcLocal, svcDNS, svcDNSClash, `
apiVersion: v1
kind: Service
metadata: {name: theirs, namespace: shop}
spec: {type: LoadBalancer, loadBalancerClass: example.com/lb, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: shop}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: dual, namespace: shop}
spec:
  type: LoadBalancer
  ipFamilies: [IPv6, IPv4]
  ports: [{port: 443}]
status: {loadBalancer: {ingress: [{ip: 10.50.0.40}, {hostname: lb.example}]}}`)
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	ts := func(s string) metav1.Time {
		var t metav1.Time
		if err := t.UnmarshalQueryParameter(s); err != nil {
			panic(err)
		}
		return t
	}
	lbIPs := "metadata.annotations[novaedge.io/loadBalancerIPs]"
	want := []ServiceInfo{
		{Namespace: "edge", Name: "dns-udp", Created: ts("2024-01-02T00:00:00Z"), VIP: "Service/shared:dns", Pool: "lb-pool",
			Requested: addrs("10.50.0.53"), RequestField: lbIPs, Families: []int{4}, SharingKey: "dns",
			Ports: []ServicePort{{53, "UDP"}}, EndpointNodes: []string{"node-b"}},
		{Namespace: "infra", Name: "dns-clash", Created: ts("2024-01-03T00:00:00Z"), VIP: "Service/shared:dns", Pool: "lb-pool",
			Requested: addrs("10.50.0.53"), RequestField: lbIPs, Families: []int{4}, SharingKey: "dns", Ports: []ServicePort{{53, "TCP"}, {853, "TCP"}},
			Problem: `spec.ports[0]: cannot share an address with Service infra/dns-tcp under key "dns": TCP port 53 is already served there by Service infra/dns-tcp; the older Services keep the address and this one is not served`},
		{Namespace: "infra", Name: "dns-tcp", Created: ts("2024-01-01T00:00:00Z"), VIP: "Service/shared:dns", Pool: "lb-pool",
			Requested: addrs("10.50.0.53"), RequestField: lbIPs, Families: []int{4}, SharingKey: "dns",
			Ports: []ServicePort{{53, "TCP"}}, EndpointNodes: []string{"node-a"}},
		{Namespace: "shop", Name: "dual", VIP: "Service/shop/dual", Families: []int{4, 6},
			Ports: []ServicePort{{443, "TCP"}}, Current: addrs("10.50.0.40")},
		{Namespace: "shop", Name: "local", VIP: "Service/shop/local", Families: []int{4}, LocalTraffic: true,
			Ports: []ServicePort{{80, "TCP"}}, EndpointNodes: []string{"node-a", "node-b"}},
		{Namespace: "shop", Name: "web", VIP: "Service/shop/web", Requested: addrs("10.50.0.10"), RequestField: lbIPs, Families: []int{4},
			Ports: []ServicePort{{80, "TCP"}, {443, "TCP"}}, EndpointNodes: []string{"node-a", "node-b", "node-c"}},
	}
	got := ServedServices(in, Options{})
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("ServedServices (-want +got):\n%s", diff)
	}
}
