package snapshot

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// readInput decodes a multi-document YAML file into an Input, strictly.
// (The loader package does this for users, with schema validation and
// positions; the builder's tests stay independent of it.)
func readInput(t testing.TB, path string) *Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseInput(t, path, data)
}

// parseInput is readInput for YAML held in memory; path names it in errors.
func parseInput(t testing.TB, path string, data []byte) *Input {
	t.Helper()
	in := &Input{}
	for i, doc := range strings.Split(string(data), "\n---") {
		var tm struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		var dst any
		switch tm.Kind {
		case "":
			continue
		case "ProxyVIP":
			in.VIPs = append(in.VIPs, v1alpha1.ProxyVIP{})
			dst = &in.VIPs[len(in.VIPs)-1]
		case "ProxyIPPool":
			in.Pools = append(in.Pools, v1alpha1.ProxyIPPool{})
			dst = &in.Pools[len(in.Pools)-1]
		case "ProxyGateway":
			in.Gateways = append(in.Gateways, v1alpha1.ProxyGateway{})
			dst = &in.Gateways[len(in.Gateways)-1]
		case "ProxyRoute":
			in.Routes = append(in.Routes, v1alpha1.ProxyRoute{})
			dst = &in.Routes[len(in.Routes)-1]
		case "ProxyBackend":
			in.Backends = append(in.Backends, v1alpha1.ProxyBackend{})
			dst = &in.Backends[len(in.Backends)-1]
		case "ProxyPolicy":
			in.Policies = append(in.Policies, v1alpha1.ProxyPolicy{})
			dst = &in.Policies[len(in.Policies)-1]
		case "Secret":
			in.Secrets = append(in.Secrets, corev1.Secret{})
			dst = &in.Secrets[len(in.Secrets)-1]
		case "Service":
			in.Services = append(in.Services, corev1.Service{})
			dst = &in.Services[len(in.Services)-1]
		case "EndpointSlice":
			in.EndpointSlices = append(in.EndpointSlices, discoveryv1.EndpointSlice{})
			dst = &in.EndpointSlices[len(in.EndpointSlices)-1]
		default:
			t.Fatalf("%s: document %d: unexpected kind %q", path, i, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), dst); err != nil {
			t.Fatalf("%s: document %d (%s): %v", path, i, tm.Kind, err)
		}
	}
	return in
}

// render is the golden form of a build: diagnostics, then the snapshot as
// indented JSON (re-indented, since protojson's spacing is deliberately
// unstable).
func render(t testing.TB, s *pb.ConfigSnapshot, diags []string) []byte {
	t.Helper()
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "diagnostics") // rendered as lines above
	pretty, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("# diagnostics\n")
	for _, d := range diags {
		b.WriteString(d + "\n")
	}
	b.WriteString("# snapshot\n")
	b.Write(pretty)
	b.WriteString("\n")
	return b.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./snapshot -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got), run with -update if intended:\n%s", path, diff)
	}
}

func decisionsFixture() *Decisions {
	return &Decisions{
		Addresses: map[string][]netip.Addr{"l2": {netip.MustParseAddr("10.200.0.5")}},
		Assignments: map[string]Assignment{
			"bgp-a": {Announcing: []string{"node-a", "node-b"}},
			"bgp-b": {Announcing: []string{"node-a"}},
			"l2":    {Active: "node-b", Standbys: []string{"node-a", "node-c"}},
			"ospf":  {Announcing: []string{"node-a"}},
		},
		EndpointHealth: map[string]bool{"10.244.1.2:6443": false, "10.244.1.3:6443": true},
	}
}

func TestBuildGolden(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		node      Node
		complete  bool
		decisions *Decisions
	}{
		{name: "standalone", input: "standalone.yaml", node: Node{Name: "edge-1"}},
		{name: "seed-examples", input: "seed-examples.yaml", node: Node{Name: "edge-1", Labels: map[string]string{"node-role.kubernetes.io/edge": "true"}}},
		{name: "seed-examples-unlabelled", input: "seed-examples.yaml", node: Node{Name: "plain"}},
		{name: "errors", input: "errors.yaml", node: Node{Name: "node-a"}, complete: true},
		{name: "errors-files", input: "errors.yaml", node: Node{Name: "node-a"}},
		{name: "decisions-node-a", input: "decisions.yaml", node: Node{Name: "node-a"}, complete: true, decisions: decisionsFixture()},
		{name: "decisions-node-b", input: "decisions.yaml", node: Node{Name: "node-b"}, complete: true, decisions: decisionsFixture()},
		{name: "forwarding", input: "forwarding.yaml", node: Node{Name: "node-a"}, complete: true},
		{name: "services", input: "services.yaml", node: Node{Name: "node-a"}, complete: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := readInput(t, filepath.Join("testdata", tc.input))
			in.Decisions = tc.decisions
			s, diags := Build(in, Options{Node: tc.node, Version: 7, ClusterComplete: tc.complete})
			var lines []string
			for _, d := range diags {
				lines = append(lines, d.String())
			}
			golden(t, tc.name, render(t, s, lines))
			if got, want := len(s.Diagnostics), len(diags); got != want {
				t.Errorf("snapshot carries %d diagnostics, Build returned %d", got, want)
			}
			if s.ContentHash != ContentHash(s) || len(s.ContentHash) != 64 {
				t.Errorf("content hash %q does not match the content", s.ContentHash)
			}
		})
	}
}

// The acceptance facts of the seed examples, asserted directly so they do
// not hide in a golden file.
func TestSeedExamples(t *testing.T) {
	in := readInput(t, "testdata/seed-examples.yaml")
	_, diags := Build(in, Options{Node: Node{Name: "n"}})
	text := func(sev string) string {
		var b strings.Builder
		for _, d := range diags {
			if d.Severity.String() == sev {
				fmt.Fprintln(&b, d.String())
			}
		}
		return b.String()
	}
	errs, warns := text("error"), text("warning")
	for _, want := range []string{
		"ProxyVIP web-vip-bgp-dual: spec.address: address 10.200.0.20 is already claimed by ProxyVIP web-vip-bgp",
		"ProxyVIP web-vip-bgp-redundant: spec.address: address 10.200.0.20 is already claimed by ProxyVIP web-vip-bgp",
		"ProxyIPPool production-pool: spec: overlaps ProxyIPPool external-pool",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("missing error %q in:\n%s", want, errs)
		}
	}
	for _, want := range []string{
		"ProxyVIP web-vip-l2: spec.address: address 10.200.0.10 lies inside ProxyIPPool external-pool",
		"ProxyBackend production/prod-backend: spec.serviceRef.name: Service production/web-app not found",
		"ProxyGateway production/prod-gateway: spec.listeners[0].tls.secretRef: Secret production/prod-tls-cert not found",
		"ProxyVIP web-vip-ospf: spec.ospfConfig.authKey: inline authKey is deprecated",
	} {
		if !strings.Contains(warns, want) {
			t.Errorf("missing warning %q in:\n%s", want, warns)
		}
	}
	if n := strings.Count(errs, "\n"); n == 0 {
		t.Error("seed examples must produce errors")
	}
}

func TestClusterPartIdenticalAcrossNodes(t *testing.T) {
	in := readInput(t, "testdata/decisions.yaml")
	in.Decisions = decisionsFixture()
	a, _ := Build(in, Options{Node: Node{Name: "node-a"}, ClusterComplete: true})
	b, _ := Build(in, Options{Node: Node{Name: "node-b"}, ClusterComplete: true})
	if !bytes.Equal(ClusterBytes(a), ClusterBytes(b)) {
		t.Fatal("cluster parts differ between nodes")
	}
	if a.ContentHash == b.ContentHash {
		t.Fatal("node parts differ, so the content hashes must too")
	}
}

// Build must leave its input as it was: the controller builds from its
// informers' shared objects, and the standalone loader hands every load the
// objects it decoded once (loader.Load).
func TestBuildDoesNotModifyInput(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test inputs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in := readInput(t, f)
			before := readInput(t, f)
			// Room past the end of the slices translators append to,
			// holding a marker: an append must not write there either.
			for _, in := range []*Input{in, before} {
				in.Gateways = append(in.Gateways, v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Name: "marker"}})[:len(in.Gateways)]
				in.Routes = append(in.Routes, v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: "marker"}})[:len(in.Routes)]
				in.Backends = append(in.Backends, v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Name: "marker"}})[:len(in.Backends)]
			}
			for _, node := range []string{"n", "node-a", "edge-1"} {
				Build(in, Options{Node: Node{Name: node}})
				Build(in, Options{Node: Node{Name: node}, Translators: []Translator{appender{}}})
			}
			if diff := cmp.Diff(before, in); diff != "" {
				t.Errorf("Build modified its input:\n%s", diff)
			}
			for kind, name := range map[string]string{
				"gateways": in.Gateways[:len(in.Gateways)+1][len(in.Gateways)].Name,
				"routes":   in.Routes[:len(in.Routes)+1][len(in.Routes)].Name,
				"backends": in.Backends[:len(in.Backends)+1][len(in.Backends)].Name,
			} {
				if name != "marker" {
					t.Errorf("Build wrote past the end of the input's %s: %q", kind, name)
				}
			}
		})
	}
}

// appender is a translator that adds a gateway, a route and a backend, as
// a translation of Ingress or Gateway API objects does.
type appender struct{}

func (appender) Name() string { return "appender" }

func (appender) Translate(in *Input, _ *diag.List) {
	in.Gateways = append(in.Gateways, v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Name: "translated", Namespace: "default"}})
	in.Routes = append(in.Routes, v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: "translated", Namespace: "default"}})
	in.Backends = append(in.Backends, v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Name: "translated", Namespace: "default"}})
}

func TestBuildEmptyAndNil(t *testing.T) {
	for _, in := range []*Input{nil, {}} {
		s, diags := Build(in, Options{Node: Node{Name: "n"}})
		if len(diags) != 0 || s.GetCluster() == nil || s.GetNode().GetNodeName() != "n" {
			t.Errorf("empty build: %v %v", s, diags)
		}
	}
}

// TestNodeAddressesForHeartbeats: an L2ARP VIP's assignment carries the
// InternalIP of its active and standby nodes (IPv4 preferred), and nothing
// for nodes whose address is unknown.
func TestNodeAddressesForHeartbeats(t *testing.T) {
	node := func(name string, addrs ...corev1.NodeAddress) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	in := &Input{
		VIPs: []v1alpha1.ProxyVIP{{ObjectMeta: metav1.ObjectMeta{Name: "l2"}, Spec: v1alpha1.ProxyVIPSpec{Address: "10.200.0.5", Mode: v1alpha1.VIPModeL2ARP}}},
		Nodes: []corev1.Node{
			node("node-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8::a"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}),
			node("node-b", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8::b"}),
			node("node-c", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-c"}),
			node("node-d", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.13"}),
		},
		Decisions: &Decisions{Assignments: map[string]Assignment{"l2": {Active: "node-b", Standbys: []string{"node-a", "node-c"}}}},
	}
	snap, _ := Build(in, Options{Node: Node{Name: "node-a"}})
	vips := snap.GetNode().GetVips()
	if len(vips) != 1 {
		t.Fatalf("node part: %v", vips)
	}
	want := map[string]string{"node-a": "192.0.2.10", "node-b": "2001:db8::b"}
	if got := vips[0].GetNodeAddresses(); !maps.Equal(got, want) {
		t.Errorf("node addresses %v, want %v", got, want)
	}
}

// TestBuildSharedIsBuild: every node's snapshot from BuildShared equals
// Build's for that node (cluster and node parts, hash, diagnostics), over
// every test input and nodes that serve VIPs in several roles, announce
// nothing, or carry labels a VIP selects; for an input with a Local
// Service (with decisions, as BuildShared requires), only nodes whose
// cluster part is the shared one are compared (the others are what
// BuildShared's contract leaves out, and the test checks such nodes exist,
// so the exclusion is not vacuous).
func TestBuildSharedIsBuild(t *testing.T) {
	nodes := []Node{
		{Name: "(none)"}, {Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}, {Name: "edge-1"},
		{Name: "edge-2", Labels: map[string]string{"node-role.kubernetes.io/edge": "true"}}, {Name: "plain"},
	}
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test inputs: %v", err)
	}
	own := 0 // nodes with a cluster part of their own, not compared
	defer func() {
		if own == 0 {
			t.Error("no node had Local endpoints of its own: what BuildShared leaves out is untested")
		}
	}()
	type variant struct {
		file  string
		local bool // shop/web made externalTrafficPolicy Local (services.yaml)
	}
	variants := []variant{{file: "testdata/services.yaml", local: true}}
	for _, f := range files {
		variants = append(variants, variant{file: f})
	}
	for _, v := range variants {
		for _, decisions := range []*Decisions{nil, decisionsFixture()} {
			if v.local && decisions == nil {
				continue // outside BuildShared's contract
			}
			for _, complete := range []bool{false, true} {
				name := fmt.Sprintf("%s/local=%t/decisions=%t/complete=%t", filepath.Base(v.file), v.local, decisions != nil, complete)
				t.Run(name, func(t *testing.T) {
					in := readInput(t, v.file)
					in.Decisions = decisions
					if v.local {
						i := slices.IndexFunc(in.Services, func(s corev1.Service) bool { return s.Namespace == "shop" && s.Name == "web" })
						if i < 0 {
							t.Fatal("services.yaml has no Service shop/web")
						}
						in.Services[i].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
						// The leader's address and nodes for it.
						in.Decisions.Addresses["Service/shop/web"] = []netip.Addr{netip.MustParseAddr("10.50.0.10")}
						in.Decisions.Assignments["Service/shop/web"] = Assignment{Active: "node-b", Standbys: []string{"node-a"}}
					}
					opts := Options{Node: nodes[0], Version: 3, ClusterComplete: complete}
					base, _ := Build(in, opts)
					snaps, sh := BuildShared(in, opts, nodes)
					// A node that serves nothing (with decisions: node-z is
					// in no assignment), from the base: the same content
					// (its diagnostics are the base's, which may name the
					// base's node in warnings about serving).
					if decisions != nil {
						o := opts
						o.Node = Node{Name: "node-z"}
						want, _ := Build(in, o)
						if got := sh.ForNode("node-z"); got.GetContentHash() != want.GetContentHash() || !proto.Equal(got.GetCluster(), want.GetCluster()) || !proto.Equal(got.GetNode(), want.GetNode()) {
							t.Error("ForNode differs from Build for a node that serves nothing")
						}
					}
					for i, n := range nodes {
						o := opts
						o.Node = n
						want, _ := Build(in, o)
						if !proto.Equal(want.GetCluster(), base.GetCluster()) {
							own++ // a node with Local endpoints of its own
							continue
						}
						if diff := cmp.Diff(want, snaps[i], protocmp.Transform()); diff != "" {
							t.Errorf("node %s: BuildShared differs from Build (-Build +BuildShared):\n%s", n.Name, diff)
						}
					}
				})
			}
		}
	}
}
