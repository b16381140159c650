package snapshot

import (
	stdcmp "cmp"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// forwardingInput is one VIP with the given spec.forwarding (YAML, indented
// under it; empty for none), one listener of the given protocol on port
// 5432, and one backend with endpoints on port 5432 and epPort.
func forwardingInput(t *testing.T, forwarding, protocol string, epPort int) *Input {
	t.Helper()
	vip := "apiVersion: novaedge.io/v1alpha1\nkind: ProxyVIP\nmetadata: {name: v}\nspec:\n  address: 10.210.0.1\n  mode: Local\n"
	if forwarding != "" {
		vip += "  forwarding:\n" + forwarding
	}
	route := "  parentRefs: [{name: gw}]\n"
	if protocol == "HTTP" {
		route = "" // HTTP listeners take routes without parentRefs
	}
	doc := vip + fmt.Sprintf(`---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: gw, namespace: ns}
spec:
  vipRef: v
  listeners: [{name: l, port: 5432, protocol: %s}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata: {name: r, namespace: ns}
spec:
%s  rules: [{backendRefs: [{name: be}]}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: be, namespace: ns}
spec:
  endpoints: [{address: 10.220.0.1, port: 5432}, {address: 10.220.0.2, port: %d}]
`, protocol, route, epPort)
	return parseInput(t, t.Name(), []byte(doc))
}

func TestForwardingInPlan(t *testing.T) {
	nat := &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT}
	dsr := func(e pb.Encapsulation, port uint32) *pb.Forwarding {
		return &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_DSR, Encapsulation: e, GuePort: port}
	}
	const mismatch = "warning: ProxyVIP v: spec.forwarding: listener ns/gw/l: endpoint 10.220.0.2:8080 of backend ns/be has port 8080, but DSR cannot rewrite ports: packets reach the backend on the listener's port 5432, so it must listen there too (or use mode NAT)"
	tests := []struct {
		name       string
		forwarding string
		protocol   string // TCP unless set
		epPort     int    // 5432 unless set
		wantPath   pb.DataPath
		want       *pb.Forwarding // of the plan entry; the VIP's too unless vip is set
		vip        *pb.Forwarding // of the VIP, when it differs from the entry's
		wantDiags  []string
	}{
		{name: "no forwarding is NAT with SNAT", want: nat},
		{name: "NAT", forwarding: "    mode: NAT\n", want: nat},
		{name: "NAT keeping the client address", forwarding: "    mode: NAT\n    preserveClientIP: true\n",
			want: &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT, PreserveClientIp: true}},
		{name: "preserveClientIP alone is NAT", forwarding: "    preserveClientIP: true\n",
			want: &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT, PreserveClientIp: true}},
		{name: "DSR defaults to IPIP", forwarding: "    mode: DSR\n", want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0)},
		{name: "DSR IPIP", forwarding: "    mode: DSR\n    encapsulation: IPIP\n", want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0)},
		{name: "DSR GUE defaults to port 6080", forwarding: "    mode: DSR\n    encapsulation: GUE\n", want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 6080)},
		{name: "DSR GUE port", forwarding: "    mode: DSR\n    encapsulation: GUE\n    guePort: 7777\n", want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 7777)},
		{name: "DSR L2", forwarding: "    mode: DSR\n    encapsulation: L2\n", want: dsr(pb.Encapsulation_ENCAPSULATION_L2, 0)},
		{name: "UDP DSR", forwarding: "    mode: DSR\n", protocol: "UDP", want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0)},
		{name: "DSR to an endpoint on another port warns", forwarding: "    mode: DSR\n", epPort: 8080,
			want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0), wantDiags: []string{mismatch}},
		{name: "DSR GUE to an endpoint on another port warns", forwarding: "    mode: DSR\n    encapsulation: GUE\n", epPort: 8080,
			want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 6080), wantDiags: []string{mismatch}},
		{name: "NAT translates ports", epPort: 8080, want: nat},
		{name: "slow path entries have no forwarding", forwarding: "    mode: DSR\n", protocol: "HTTP", epPort: 8080,
			wantPath: pb.DataPath_DATA_PATH_SLOW, vip: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			protocol, epPort, wantPath := stdcmp.Or(tc.protocol, "TCP"), stdcmp.Or(tc.epPort, 5432), stdcmp.Or(tc.wantPath, pb.DataPath_DATA_PATH_FAST)
			s, diags := Build(forwardingInput(t, tc.forwarding, protocol, epPort), Options{Node: Node{Name: "n"}})
			var got []string
			for _, d := range diags {
				got = append(got, d.String())
			}
			if diff := cmp.Diff(tc.wantDiags, got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
			plan := s.GetCluster().GetPlan()
			if len(plan) != 1 || plan[0].GetPath() != wantPath {
				t.Fatalf("plan = %v, want one %v entry", plan, wantPath)
			}
			if diff := cmp.Diff(tc.want, plan[0].GetForwarding(), protocmp.Transform()); diff != "" {
				t.Errorf("plan entry forwarding (-want +got):\n%s", diff)
			}
			wantVIP := tc.vip
			if wantVIP == nil {
				wantVIP = tc.want
			}
			if diff := cmp.Diff(wantVIP, s.GetCluster().GetVips()[0].GetForwarding(), protocmp.Transform()); diff != "" {
				t.Errorf("VIP forwarding (-want +got):\n%s", diff)
			}
			if f := plan[0].GetForwarding(); f != nil && f == s.GetCluster().GetVips()[0].GetForwarding() {
				t.Error("plan entry and VIP share one Forwarding message")
			}
		})
	}
}

// Settings the CRD rejects are errors in the build too, and the VIP is not
// served, so files that skip schema validation behave as a cluster would.
func TestForwardingRejected(t *testing.T) {
	tests := []struct {
		name, forwarding string
		want             []string
	}{
		{"preserveClientIP with DSR", "    mode: DSR\n    preserveClientIP: true\n", []string{
			"spec.forwarding.preserveClientIP: preserveClientIP applies only to mode NAT (DSR always keeps the client address): remove preserveClientIP or set mode NAT",
		}},
		{"encapsulation without DSR", "    encapsulation: L2\n", []string{
			"spec.forwarding.encapsulation: encapsulation applies only to mode DSR: set mode DSR or remove encapsulation",
		}},
		{"guePort with NAT", "    mode: NAT\n    guePort: 7000\n", []string{
			"spec.forwarding.guePort: guePort applies only to mode DSR with encapsulation GUE: set mode DSR and encapsulation GUE, or remove guePort",
		}},
		{"guePort with IPIP", "    mode: DSR\n    guePort: 7000\n", []string{
			"spec.forwarding.guePort: guePort applies only to encapsulation GUE (DSR defaults to IPIP): set encapsulation GUE or remove guePort",
		}},
		{"guePort out of range", "    mode: DSR\n    encapsulation: GUE\n    guePort: 70000\n", []string{
			"spec.forwarding.guePort: guePort must be 1-65535; leave it out for the default 6080",
		}},
		{"unknown values", "    mode: dsr\n    encapsulation: VXLAN\n", []string{
			`spec.forwarding.encapsulation: unsupported encapsulation "VXLAN": use IPIP, GUE or L2`,
			`spec.forwarding.mode: unsupported mode "dsr": use NAT or DSR`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, diags := Build(forwardingInput(t, tc.forwarding, "TCP", 5432), Options{Node: Node{Name: "n"}})
			var got []string
			for _, d := range diags.Errors() {
				if d.Resource.Kind == kVIP {
					got = append(got, d.Field+": "+d.Message)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("VIP errors (-want +got):\n%s", diff)
			}
			if n := len(s.GetCluster().GetVips()) + len(s.GetCluster().GetPlan()); n != 0 {
				t.Errorf("the rejected VIP is served: %d VIPs and plan entries", n)
			}
		})
	}
}

func TestServiceForwarding(t *testing.T) {
	nat := &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT}
	dsr := func(e pb.Encapsulation, port uint32) *pb.Forwarding {
		return &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_DSR, Encapsulation: e, GuePort: port}
	}
	const (
		mode     = v1alpha1.AnnotationForwardingMode
		encap    = v1alpha1.AnnotationDSREncapsulation
		preserve = v1alpha1.AnnotationPreserveClientIP
		port     = v1alpha1.AnnotationGUEPort
	)
	tests := []struct {
		name string
		ann  map[string]string
		want *pb.Forwarding
		// wantDiags are "annotation: message" of the warnings.
		wantDiags []string
	}{
		{name: "none", want: nat},
		{name: "NAT", ann: map[string]string{mode: "NAT"}, want: nat},
		{name: "NAT keeping the client address", ann: map[string]string{preserve: "true"},
			want: &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT, PreserveClientIp: true}},
		{name: "NAT with SNAT said explicitly", ann: map[string]string{mode: "NAT", preserve: "false"}, want: nat},
		{name: "DSR", ann: map[string]string{mode: "DSR"}, want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0)},
		{name: "DSR GUE", ann: map[string]string{mode: "DSR", encap: "GUE"}, want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 6080)},
		{name: "DSR GUE port", ann: map[string]string{mode: "DSR", encap: "GUE", port: "7000"}, want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 7000)},
		{name: "DSR L2", ann: map[string]string{mode: "DSR", encap: "L2"}, want: dsr(pb.Encapsulation_ENCAPSULATION_L2, 0)},

		{name: "bad mode", ann: map[string]string{mode: "dsr"}, want: nat, wantDiags: []string{
			mode + `: invalid value "dsr": use NAT or DSR; NAT is used`,
		}},
		{name: "bad preserve", ann: map[string]string{preserve: "yes"}, want: nat, wantDiags: []string{
			preserve + `: invalid value "yes": use "true" or "false"; false (SNAT to the node's address) is used`,
		}},
		{name: "bad encapsulation", ann: map[string]string{mode: "DSR", encap: "VXLAN"}, want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0), wantDiags: []string{
			encap + `: invalid value "VXLAN": use IPIP, GUE or L2; IPIP is used`,
		}},
		{name: "bad port", ann: map[string]string{mode: "DSR", encap: "GUE", port: "70000"}, want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 6080), wantDiags: []string{
			port + `: invalid value "70000": use a port 1-65535; 6080 is used`,
		}},
		{name: "port zero", ann: map[string]string{mode: "DSR", encap: "GUE", port: "0"}, want: dsr(pb.Encapsulation_ENCAPSULATION_GUE, 6080), wantDiags: []string{
			port + `: invalid value "0": use a port 1-65535; 6080 is used`,
		}},
		{name: "preserve with DSR", ann: map[string]string{mode: "DSR", preserve: "true"}, want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0), wantDiags: []string{
			preserve + `: ignored: it applies only to forwarding mode NAT (DSR always keeps the client address)`,
		}},
		{name: "encapsulation without DSR", ann: map[string]string{encap: "GUE", port: "7000"}, want: nat, wantDiags: []string{
			encap + `: ignored (value "GUE"): it applies only to forwarding mode DSR; set novaedge.io/forwarding-mode to DSR`,
			port + `: ignored (value "7000"): it applies only to forwarding mode DSR with novaedge.io/dsr-encapsulation GUE`,
		}},
		{name: "port with IPIP", ann: map[string]string{mode: "DSR", port: "7000"}, want: dsr(pb.Encapsulation_ENCAPSULATION_IPIP, 0), wantDiags: []string{
			port + `: ignored (value "7000"): it applies only to forwarding mode DSR with novaedge.io/dsr-encapsulation GUE`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(nil, Options{})
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: tc.ann}}
			r := ref("Service", "ns", "s")
			got := b.serviceForwarding(r, svc)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("forwarding (-want +got):\n%s", diff)
			}
			b.diags.Sort()
			var diags []string
			for _, d := range b.diags {
				if d.Severity.String() != "warning" || d.Resource != r {
					t.Errorf("not a warning about the Service: %v", d)
				}
				diags = append(diags, strings.TrimSuffix(strings.TrimPrefix(d.Field, "metadata.annotations["), "]")+": "+d.Message)
			}
			if diff := cmp.Diff(tc.wantDiags, diags); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// Through Build, the forwarding annotations of a Service NovaEdge serves
// are used (bad values reported, defaults used); on Services it does not
// serve (another type, another loadBalancerClass, or no class when
// classless Services are left to another implementation) they are reported
// as ignored.
func TestServiceAnnotationsInBuild(t *testing.T) {
	svc := func(name string, typ corev1.ServiceType, class string, ann map[string]string) corev1.Service {
		s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80}}}}
		if class != "" {
			s.Spec.LoadBalancerClass = &class
		}
		maps.Copy(s.Annotations, ann)
		s.Annotations[v1alpha1.AnnotationLoadBalancerIPs] = fmt.Sprintf("10.9.0.%d", len(name))
		return s
	}
	in := &Input{Services: []corev1.Service{
		svc("plain-lb", corev1.ServiceTypeLoadBalancer, "", map[string]string{"other.io/x": "y"}),
		svc("lb", corev1.ServiceTypeLoadBalancer, v1alpha1.LoadBalancerClass, map[string]string{v1alpha1.AnnotationForwardingMode: "DSR"}),
		svc("bad-lb", corev1.ServiceTypeLoadBalancer, "", map[string]string{v1alpha1.AnnotationForwardingMode: "FAST"}),
		svc("other-class", corev1.ServiceTypeLoadBalancer, "example.com/lb", map[string]string{v1alpha1.AnnotationGUEPort: "7000"}),
		svc("node-port", corev1.ServiceTypeNodePort, "", map[string]string{v1alpha1.AnnotationGUEPort: "7000"}),
	}}
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{name: "classless served", want: []string{
			`warning: Service ns/bad-lb: metadata.annotations[novaedge.io/forwarding-mode]: invalid value "FAST": use NAT or DSR; NAT is used`,
			`warning: Service ns/node-port: metadata.annotations[novaedge.io/gue-port]: ignored: forwarding annotations apply only to Services of type LoadBalancer, and this one is of type NodePort`,
			`warning: Service ns/node-port: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: address annotations apply only to Services of type LoadBalancer, and this one is of type NodePort`,
			`warning: Service ns/other-class: metadata.annotations[novaedge.io/gue-port]: ignored: spec.loadBalancerClass is "example.com/lb", so another load balancer serves this Service (NovaEdge serves class "novaedge.io/lb")`,
			`warning: Service ns/other-class: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: spec.loadBalancerClass is "example.com/lb", so another load balancer serves this Service (NovaEdge serves class "novaedge.io/lb")`,
		}},
		{name: "classless skipped", opts: Options{SkipClasslessServices: true}, want: []string{
			`warning: Service ns/bad-lb: metadata.annotations[novaedge.io/forwarding-mode]: ignored: the Service has no spec.loadBalancerClass, and classless Services are left to another load balancer (controller flag --default-lb-class=false); set loadBalancerClass "novaedge.io/lb" to have NovaEdge serve it`,
			`warning: Service ns/bad-lb: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: the Service has no spec.loadBalancerClass, and classless Services are left to another load balancer (controller flag --default-lb-class=false); set loadBalancerClass "novaedge.io/lb" to have NovaEdge serve it`,
			`warning: Service ns/node-port: metadata.annotations[novaedge.io/gue-port]: ignored: forwarding annotations apply only to Services of type LoadBalancer, and this one is of type NodePort`,
			`warning: Service ns/node-port: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: address annotations apply only to Services of type LoadBalancer, and this one is of type NodePort`,
			`warning: Service ns/other-class: metadata.annotations[novaedge.io/gue-port]: ignored: spec.loadBalancerClass is "example.com/lb", so another load balancer serves this Service (NovaEdge serves class "novaedge.io/lb")`,
			`warning: Service ns/other-class: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: spec.loadBalancerClass is "example.com/lb", so another load balancer serves this Service (NovaEdge serves class "novaedge.io/lb")`,
			`warning: Service ns/plain-lb: metadata.annotations[novaedge.io/loadBalancerIPs]: ignored: the Service has no spec.loadBalancerClass, and classless Services are left to another load balancer (controller flag --default-lb-class=false); set loadBalancerClass "novaedge.io/lb" to have NovaEdge serve it`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Node = Node{Name: "n"}
			_, diags := Build(in, tc.opts)
			var got []string
			for _, d := range diags {
				if strings.HasPrefix(d.Field, "metadata.annotations") { // not the Services' missing endpoints
					got = append(got, d.String())
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

// The DSR example users are pointed to builds without diagnostics into a
// FAST entry forwarded with DSR over IPIP.
func TestDSRExample(t *testing.T) {
	s, diags := Build(readInput(t, "../deploy/examples/dsr.yaml"), Options{Node: Node{Name: "n"}})
	if len(diags) != 0 {
		t.Errorf("diagnostics: %v", diags)
	}
	plan := s.GetCluster().GetPlan()
	want := &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_DSR, Encapsulation: pb.Encapsulation_ENCAPSULATION_IPIP}
	if len(plan) != 1 || plan[0].GetPath() != pb.DataPath_DATA_PATH_FAST {
		t.Fatalf("plan = %v, want one FAST entry", plan)
	}
	if diff := cmp.Diff(want, plan[0].GetForwarding(), protocmp.Transform()); diff != "" {
		t.Errorf("forwarding (-want +got):\n%s", diff)
	}
}
