package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// sameAsBuild builds in with m and without a Memo, and fails unless both
// give the same snapshot and diagnostics.
func sameAsBuild(t *testing.T, what string, in *Input, m *Memo) {
	t.Helper()
	for _, node := range []string{"node-a", "edge-1"} {
		want, wantDiags := Build(in, Options{Node: Node{Name: node}})
		got, gotDiags := Build(in, Options{Node: Node{Name: node}, Memo: m})
		if len(wantDiags) != len(gotDiags) {
			t.Logf("DIAGS %d %d", len(wantDiags), len(gotDiags))
		}
		if !proto.Equal(want, got) {
			t.Fatalf("%s, node %s: the build with a Memo differs from Build (-Build +Memo):\n%s", what, node, cmp.Diff(want, got, protocmp.Transform()))
		}
		if diff := cmp.Diff(wantDiags, gotDiags); diff != "" {
			t.Fatalf("%s, node %s: diagnostics differ (-Build +Memo):\n%s", what, node, diff)
		}
	}
}

// TestMemoIsBuild: a build with a Memo gives what Build gives without
// one, for every test input built again with the same Memo, and along a
// random sequence of edits that change what routes depend on (backends,
// policies, listeners' hostnames, the routes themselves). Changed objects
// are new objects, as the Memo requires of its callers.
func TestMemoIsBuild(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test inputs: %v", err)
	}
	for _, f := range files {
		in, m := readInput(t, f), &Memo{}
		sameAsBuild(t, filepath.Base(f)+", first build", in, m)
		sameAsBuild(t, filepath.Base(f)+", built again", in, m)
	}

	base := parseInput(t, "scale", []byte(scaleYAML(40, 2)+`---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: be2, namespace: bench}
spec:
  endpoints: [{address: 192.0.2.21, port: 8080}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyPolicy
metadata: {name: rl, namespace: bench}
spec: {type: RateLimit, rateLimit: {requestsPerSecond: 10}}
`))
	extraBackend, policy := base.Backends[len(base.Backends)-1], base.Policies[0]
	in := base
	rng := rand.New(rand.NewPCG(1, 2))
	hosts := []string{"r1.bench.test", "r2.bench.test", "new.bench.test", "*.bench.test"}
	newRoute := func(name string) v1alpha1.ProxyRoute {
		rt := v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"}}
		rt.Spec.Hostnames = []string{hosts[rng.IntN(len(hosts))]}
		if rng.IntN(2) == 0 {
			rt.Spec.ParentRefs = []v1alpha1.ParentRef{{Name: fmt.Sprintf("gw%02d", rng.IntN(2))}}
		}
		rule := v1alpha1.RouteRule{BackendRefs: []v1alpha1.BackendRef{{Name: []string{"be", "be2", "missing"}[rng.IntN(3)]}}}
		switch rng.IntN(5) {
		case 0:
			rt.Spec.PolicyRefs = []v1alpha1.LocalObjectRef{{Name: "rl"}}
		case 2:
			rule.PolicyRefs = []v1alpha1.LocalObjectRef{{Name: "rl"}}
		case 1:
			rule.Filters = []v1alpha1.RouteFilter{{Type: v1alpha1.FilterRequestMirror, RequestMirror: &v1alpha1.RequestMirror{BackendRef: v1alpha1.NamespacedRef{Name: "be2"}}}}
		}
		rt.Spec.Rules = []v1alpha1.RouteRule{rule}
		return rt
	}
	// A route that moves from one gateway's listener to the other's.
	m := &Memo{}
	moved := *base
	moved.Routes = []v1alpha1.ProxyRoute{{ObjectMeta: metav1.ObjectMeta{Name: "moves", Namespace: "bench"}}}
	moved.Routes[0].Spec.Hostnames = []string{"new.bench.test"}
	moved.Routes[0].Spec.Rules = []v1alpha1.RouteRule{{BackendRefs: []v1alpha1.BackendRef{{Name: "be"}}}}
	for _, hosts := range [][2][]string{{{"r1.bench.test"}, nil}, {nil, {"r1.bench.test"}}} {
		moved.Gateways = slices.Clone(moved.Gateways)
		for i := range moved.Gateways {
			moved.Gateways[i] = *moved.Gateways[i].DeepCopy()
			moved.Gateways[i].Spec.Listeners[0].Hostnames = hosts[i]
		}
		sameAsBuild(t, fmt.Sprintf("a route that moves between listeners, gateways' hostnames %q", hosts), &moved, m)
	}

	m = &Memo{}
	for step := range 300 {
		next := *in
		next.Routes = slices.Clone(in.Routes)
		var what string
		switch op := rng.IntN(7); op {
		case 0:
			what = "a route added"
			next.Routes = append(next.Routes, newRoute(fmt.Sprintf("x%03d", step)))
		case 1:
			i := rng.IntN(len(next.Routes))
			what = "route " + next.Routes[i].Name + " removed"
			next.Routes = slices.Delete(next.Routes, i, i+1)
		case 2:
			i := rng.IntN(len(next.Routes))
			what = "route " + next.Routes[i].Name + " replaced"
			next.Routes[i] = newRoute(next.Routes[i].Name)
		case 3:
			what = "backend be2 toggled"
			next.Backends = slices.DeleteFunc(slices.Clone(in.Backends), func(b v1alpha1.ProxyBackend) bool { return b.Name == "be2" })
			if len(next.Backends) == len(in.Backends) {
				next.Backends = append(next.Backends, extraBackend)
			}
		case 4:
			what = "policy rl toggled"
			next.Policies = nil
			if len(in.Policies) == 0 {
				next.Policies = []v1alpha1.ProxyPolicy{policy}
			}
		case 5:
			// Both gateways at once, so that a route can move from one
			// listener to another, attaching to as many as before.
			what = "the gateways' hostnames changed"
			next.Gateways = slices.Clone(in.Gateways)
			for i := range next.Gateways {
				next.Gateways[i] = *next.Gateways[i].DeepCopy()
				next.Gateways[i].Spec.Listeners[0].Hostnames = [][]string{nil, {"*.bench.test"}, {"r1.bench.test"}, {"new.bench.test"}}[rng.IntN(4)]
			}
		case 6:
			what = "routes reordered"
			rng.Shuffle(len(next.Routes), func(i, j int) { next.Routes[i], next.Routes[j] = next.Routes[j], next.Routes[i] })
		}
		in = &next
		sameAsBuild(t, fmt.Sprintf("step %d (%s)", step, what), in, m)
	}
	if m.recalled == 0 {
		t.Fatal("no route was taken from the Memo: the test checks nothing")
	}
	t.Logf("%d routes taken from the Memo", m.recalled)
}

// TestMemoRecalls: building the same input again with a Memo takes every
// clean HTTP route from it; a route that changed is built again.
func TestMemoRecalls(t *testing.T) {
	in := parseInput(t, "scale", []byte(scaleYAML(100, 2)))
	m := &Memo{}
	first, _ := Build(in, Options{Node: Node{Name: "n"}, Memo: m})
	second, _ := Build(in, Options{Node: Node{Name: "n"}, Memo: m})
	if m.recalled != 100 {
		t.Fatalf("%d of 100 routes taken from the Memo on the second build", m.recalled)
	}
	for i, r := range second.GetCluster().GetRoutes() {
		if r != first.GetCluster().GetRoutes()[i] {
			t.Fatalf("route %s was built again", r.GetName())
		}
	}
	next := *in
	next.Routes = slices.Clone(in.Routes)
	next.Routes[7] = *in.Routes[7].DeepCopy()
	next.Routes[7].Spec.Hostnames = []string{"changed.bench.test"}
	m.recalled = 0
	third, _ := Build(&next, Options{Node: Node{Name: "n"}, Memo: m})
	if m.recalled != 99 {
		t.Fatalf("%d of 99 unchanged routes taken from the Memo", m.recalled)
	}
	for _, r := range third.GetCluster().GetRoutes() {
		if r.GetName() == "bench/"+in.Routes[7].Name && !slices.Equal(r.GetHostnames(), []string{"changed.bench.test"}) {
			t.Fatalf("the changed route has hostnames %v", r.GetHostnames())
		}
	}
}

// TestWriteClusterIsMarshal: the cluster part written in pieces, as the
// content hash reads it, is byte for byte its deterministic encoding, and
// the content hash is the SHA-256 of that encoding and the node part's, for
// every test input, the scale configuration, and with unknown fields.
func TestWriteClusterIsMarshal(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test inputs: %v", err)
	}
	inputs := map[string]*Input{"scale": parseInput(t, "scale", []byte(scaleYAML(50, 3)))}
	for _, f := range files {
		inputs[filepath.Base(f)] = readInput(t, f)
	}
	for name, in := range inputs {
		s, _ := Build(in, Options{Node: Node{Name: "node-a"}})
		unknown := proto.Clone(s).(*pb.ConfigSnapshot)
		unknown.Cluster.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
		for what, s := range map[string]*pb.ConfigSnapshot{name: s, name + " with an unknown field": unknown} {
			var buf bytes.Buffer
			writeCluster(&buf, s.GetCluster(), routeRecord)
			want := ClusterBytes(s)
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s: written in pieces, %d bytes differ from the encoding's %d", what, buf.Len(), len(want))
			}
			node, err := deterministic.Marshal(s.GetNode())
			if err != nil {
				t.Fatal(err)
			}
			sha := sha256.Sum256(append(want, node...))
			sum := hex.EncodeToString(sha[:])
			if got := ContentHash(s); got != sum {
				t.Errorf("%s: content hash %s is not the SHA-256 of the encodings", what, got)
			}
			if got := hashCluster(s.GetCluster(), routeRecord).with(s.GetNode()); got != sum {
				t.Errorf("%s: the hash of the part written in pieces is %s, want %s", what, got, sum)
			}
		}
		if s.GetContentHash() != ContentHash(s) {
			t.Errorf("%s: Build's content hash %s, ContentHash %s", name, s.GetContentHash(), ContentHash(s))
		}
	}
}

// TestMemoHold: a Memo with Hold lets go of what the last build left once
// Hold passed without a build, and keeps it while builds come sooner.
func TestMemoHold(t *testing.T) {
	in := parseInput(t, "scale", []byte(scaleYAML(10, 1)))
	m := &Memo{Hold: time.Second}
	held := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.last)
	}
	for range 5 {
		Build(in, Options{Node: Node{Name: "n"}, Memo: m})
		if held() != 10 {
			t.Fatalf("the memo holds %d routes right after a build of 10", held())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m.recalled != 40 {
		t.Fatalf("%d routes taken from the memo in 4 builds of 10 within its Hold", m.recalled)
	}
	deadline := time.Now().Add(10 * time.Second)
	for held() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the memo still holds its routes 10 s after its 1 s Hold")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.recalled = 0
	Build(in, Options{Node: Node{Name: "n"}, Memo: m})
	Build(in, Options{Node: Node{Name: "n"}, Memo: m})
	if m.recalled != 10 {
		t.Fatalf("after the memo let go, a build took %d routes from the next", m.recalled)
	}
}
