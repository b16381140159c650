package controller

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

const lineageNS = "novaedge-system"

// lineageInput is a cluster with two Services of type LoadBalancer on port
// 80: "global" (externalTrafficPolicy Cluster, n endpoints 10.1.0.1,
// 10.1.0.2, …) and "local" (Local, 70 endpoints), at 10.9.0.2 and 10.9.0.3.
func lineageInput(n int) *snapshot.Input {
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
	slice := func(svc string, addrs ...string) discoveryv1.EndpointSlice {
		port := int32(8080)
		es := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &port}},
		}
		for i, a := range addrs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr(fmt.Sprintf("node-%d", i%3)), Conditions: discoveryv1.EndpointConditions{Ready: &tru}})
		}
		return es
	}
	var global, localAddrs []string
	for i := range 70 {
		localAddrs = append(localAddrs, fmt.Sprintf("10.2.0.%d", i+1))
	}
	for i := range n {
		global = append(global, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
	}
	return &snapshot.Input{
		Services:       []corev1.Service{svc("global", false), svc("local", true)},
		EndpointSlices: []discoveryv1.EndpointSlice{slice("global", global...), slice("local", localAddrs...)},
		Decisions: &snapshot.Decisions{
			Addresses: map[string][]netip.Addr{
				snapshot.ServiceVIPName("shop", "global"): {netip.MustParseAddr("10.9.0.2")},
				snapshot.ServiceVIPName("shop", "local"):  {netip.MustParseAddr("10.9.0.3")},
			},
			Assignments:    map[string]snapshot.Assignment{},
			EndpointHealth: map[string]bool{},
		},
	}
}

func lineageClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// leaderRound is one decider run's part for lineages: build for no node
// with the persisted lineages, compute, persist. It returns the writes.
func leaderRound(t *testing.T, cl client.Client, ls *lineages, in *snapshot.Input) ([]lineageWrite, *pb.ConfigSnapshot) {
	t.Helper()
	ctx := context.Background()
	have, err := readLineages(ctx, cl, lineageNS, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Decisions.MaglevLineage = map[string]*pb.MaglevLineage{}
	for _, p := range have {
		if p.err == nil {
			in.Decisions.MaglevLineage[p.key] = p.lineage
		}
	}
	c := &Controller{opts: Options{ServeClasslessServices: true}}
	snap, _ := snapshot.Build(in, c.buildOptions("", nil))
	want, hold, errs := ls.desired(snap.GetCluster().GetPlan())
	done, werrs := persistLineages(ctx, cl, lineageNS, have, want, hold)
	if errs = append(errs, werrs...); len(errs) > 0 {
		t.Fatalf("lineage errors: %v", errs)
	}
	return done, snap
}

func planEntry(t *testing.T, snap *pb.ConfigSnapshot, key string) *pb.PlanEntry {
	t.Helper()
	for _, e := range snap.GetCluster().GetPlan() {
		if snapshot.PlanKey(e) == key {
			return e
		}
	}
	t.Fatalf("no plan entry %s", key)
	return nil
}

// persisted returns the lineage ConfigMaps in the fake API by entry.
func persisted(t *testing.T, cl client.Client) map[string]*pb.MaglevLineage {
	t.Helper()
	have, err := readLineages(context.Background(), cl, lineageNS, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pb.MaglevLineage{}
	for _, p := range have {
		if p.err != nil {
			t.Fatalf("ConfigMap %s: %v", p.cm.Name, p.err)
		}
		out[p.key] = p.lineage
	}
	return out
}

// slotKeys is lineage.Owners, failing the test on an error.
func slotKeys(t *testing.T, l *pb.MaglevLineage) []string {
	t.Helper()
	out, err := lineage.Owners(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLineagePersistence follows one cluster-wide Service through the
// leader's runs: the first run persists its table, an unchanged run writes
// nothing, an endpoint leaving moves only that endpoint's slots, and the
// Local Service never gets a ConfigMap; every snapshot built from the
// persisted decisions carries the persisted lineage.
func TestLineagePersistence(t *testing.T) {
	const global, local = "10.9.0.2:80/tcp", "10.9.0.3:80/tcp"
	cl := lineageClient(t)
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	in := lineageInput(80)

	done, _ := leaderRound(t, cl, ls, in)
	if len(done) != 1 || done[0].op != "create" || done[0].key != global || done[0].name != MaglevLineageConfigMap(global) || done[0].backends != 80 {
		t.Fatalf("first run wrote %+v, want one create of %s with 80 backends", done, global)
	}
	first := persisted(t, cl)
	if got := slices.Sorted(maps.Keys(first)); !slices.Equal(got, []string{global}) {
		t.Fatalf("persisted entries %v, want only %s (the Local Service has none)", got, global)
	}
	var cm corev1.ConfigMap
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: lineageNS, Name: MaglevLineageConfigMap(global)}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[LabelMaglevLineage] != "true" || cm.Data[MaglevLineageEntryKey] != global || !strings.HasPrefix(cm.Name, MaglevLineagePrefix) || len(cm.Name) != len(MaglevLineagePrefix)+16 {
		t.Errorf("ConfigMap %s labels %v data %v", cm.Name, cm.Labels, cm.Data)
	}

	done, snap := leaderRound(t, cl, ls, in)
	if len(done) != 0 {
		t.Errorf("an unchanged run wrote %+v", done)
	}
	if e := planEntry(t, snap, global); !proto.Equal(e.GetLineage(), first[global]) {
		t.Errorf("the build does not carry the persisted lineage")
	}
	if e := planEntry(t, snap, local); !e.GetNodeLocal() || e.GetLineage() != nil {
		t.Errorf("Local entry: node_local %v, lineage %v", e.GetNodeLocal(), e.GetLineage() != nil)
	}

	// 10.1.0.7 leaves.
	es := &in.EndpointSlices[0]
	gone := "10.1.0.7:8080"
	es.Endpoints = slices.DeleteFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Addresses[0] == "10.1.0.7" })
	done, _ = leaderRound(t, cl, ls, in)
	if len(done) != 1 || done[0].op != "update" || done[0].backends != 79 {
		t.Fatalf("after an endpoint left: %+v, want one update with 79 backends", done)
	}
	second := persisted(t, cl)[global]
	before, after := slotKeys(t, first[global]), slotKeys(t, second)
	moved, owned := 0, 0
	for s := range before {
		if before[s] == gone {
			owned++
		}
		if before[s] != after[s] {
			moved++
			if before[s] != gone {
				t.Fatalf("slot %d moved from %s, which stayed, to %s", s, before[s], after[s])
			}
		}
	}
	if owned == 0 || moved != owned {
		t.Errorf("%d slots moved, %s owned %d", moved, gone, owned)
	}
	if done, _ := leaderRound(t, cl, ls, in); len(done) != 0 {
		t.Errorf("the run after the update wrote %+v", done)
	}

	// A new leader, without the memo, builds from the persisted table and
	// writes nothing.
	fresh, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := leaderRound(t, cl, fresh, in); len(done) != 0 {
		t.Errorf("a new leader rewrote %+v", done)
	}
	if got := persisted(t, cl)[global]; !proto.Equal(got, second) {
		t.Error("a new leader changed the lineage")
	}

	// The Service goes: its ConfigMap goes with it.
	in.Services = in.Services[1:]
	done, _ = leaderRound(t, cl, ls, in)
	if len(done) != 1 || done[0].op != "delete" || done[0].key != global {
		t.Errorf("after the Service left: %+v, want the delete of %s", done, global)
	}
	if got := persisted(t, cl); len(got) != 0 {
		t.Errorf("left behind: %v", slices.Collect(maps.Keys(got)))
	}
}

// TestLineageCleanup: ConfigMaps the leader cannot use are rewritten when
// their entry wants a table and deleted when it does not; strays and
// lineages of entries that are gone are deleted.
func TestLineageCleanup(t *testing.T) {
	const global = "10.9.0.2:80/tcp"
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	cm := func(name, key string, raw []byte) *corev1.ConfigMap {
		c := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: lineageNS, Name: name, Labels: map[string]string{LabelMaglevLineage: "true"}},
			Data:       map[string]string{MaglevLineageEntryKey: key},
			BinaryData: map[string][]byte{MaglevLineageDataKey: raw},
		}
		if raw == nil {
			c.BinaryData = nil
		}
		return c
	}
	// A valid lineage of the entry, of other backends than the Service's.
	other := lineageInput(70)
	other.EndpointSlices[0].Endpoints[0].Addresses = []string{"10.3.0.1"}
	oc := lineageClient(t)
	leaderRound(t, oc, ls, other)
	_, bin, err := encodeLineage(global, persisted(t, oc)[global])
	if err != nil {
		t.Fatal(err)
	}
	raw := bin[MaglevLineageDataKey]
	gone := "10.9.0.99:443/tcp"
	name := MaglevLineageConfigMap(global)
	unrelated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: lineageNS, Name: "user-settings"}, Data: map[string]string{"x": "y"}}

	tests := []struct {
		name      string
		have      []client.Object
		endpoints int
		draining  bool
		wantLeft  []string // lineage ConfigMaps left
		wantOps   []string // writes, in order
	}{
		{"broken: rewritten", []client.Object{cm(name, global, []byte("not a lineage"))}, 70, false, []string{name}, []string{"update"}},
		{"no binaryData: rewritten", []client.Object{cm(name, global, nil)}, 70, false, []string{name}, []string{"update"}},
		{"valid, other backends: the next table", []client.Object{cm(name, global, raw)}, 70, false, []string{name}, []string{"update"}},
		{"entry gone: deleted", []client.Object{cm(MaglevLineageConfigMap(gone), gone, raw)}, 70, false, []string{name}, []string{"create", "delete"}},
		{"stray name: deleted", []client.Object{cm(MaglevLineagePrefix+"0000000000000000", global, raw)}, 70, false, []string{name}, []string{"create", "delete"}},
		{"no entry: deleted", []client.Object{cm(MaglevLineagePrefix+"1111111111111111", "", raw)}, 70, false, []string{name}, []string{"create", "delete"}},
		{"broken, and too few endpoints to start one: deleted", []client.Object{cm(name, global, []byte{0xff})}, 40, false, nil, []string{"delete"}},
		{"every endpoint draining: deleted", []client.Object{cm(name, global, raw)}, 70, true, nil, []string{"delete"}},
		{"unlabelled ConfigMaps are not ours", []client.Object{unrelated}, 40, false, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := lineageClient(t, tc.have...)
			in := lineageInput(tc.endpoints)
			if tc.draining {
				for i := range in.EndpointSlices[0].Endpoints {
					in.EndpointSlices[0].Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
				}
			}
			done, snap := leaderRound(t, cl, ls, in)
			var ops []string
			for _, d := range done {
				ops = append(ops, d.op)
			}
			if !slices.Equal(ops, tc.wantOps) {
				t.Errorf("writes %+v, want ops %v", done, tc.wantOps)
			}
			var list corev1.ConfigMapList
			if err := cl.List(context.Background(), &list, client.InNamespace(lineageNS), client.MatchingLabels{LabelMaglevLineage: "true"}); err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, c := range list.Items {
				left = append(left, c.Name)
			}
			if !slices.Equal(left, tc.wantLeft) {
				t.Errorf("ConfigMaps left %v, want %v", left, tc.wantLeft)
			}
			if tc.draining {
				if e := planEntry(t, snap, global); len(e.GetEndpoints()) == 0 || e.GetEndpoints()[0].GetState() != pb.EndpointState_ENDPOINT_STATE_DRAINING {
					t.Fatalf("the endpoints do not drain: %v", e.GetEndpoints())
				}
			}
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(unrelated), &corev1.ConfigMap{}); err == nil && !slices.Contains(tc.have, client.Object(unrelated)) {
				t.Error("an unrelated ConfigMap appeared")
			}
			if len(tc.wantLeft) == 0 {
				return
			}
			// What is left is the table the Service's endpoints give,
			// and a second run leaves it alone.
			if got := persisted(t, cl)[global]; got == nil || len(got.GetBackends()) != tc.endpoints {
				t.Fatalf("persisted %d backends, want %d", len(got.GetBackends()), tc.endpoints)
			}
			if done, _ := leaderRound(t, cl, ls, in); len(done) != 0 {
				t.Errorf("second run wrote %+v", done)
			}
		})
	}
}

// TestLineageThreshold: an entry gets a lineage from lineage.MinBackends
// live endpoints on and keeps it down to half that many (lineage.Wanted).
func TestLineageThreshold(t *testing.T) {
	const global = "10.9.0.2:80/tcp"
	n := lineage.MinBackends
	cl := lineageClient(t)
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		endpoints int
		op        string // the one write expected; empty: none
	}{
		{n - 1, ""},
		{n, "create"},
		{n / 2, "update"},
		{n/2 - 1, "delete"},
		{n - 1, ""},
		{n, "create"},
	} {
		done, _ := leaderRound(t, cl, ls, lineageInput(step.endpoints))
		var ops []string
		for _, d := range done {
			ops = append(ops, d.op)
		}
		if want := slices.DeleteFunc([]string{step.op}, func(s string) bool { return s == "" }); !slices.Equal(ops, want) {
			t.Errorf("%d endpoints: writes %+v, want %v", step.endpoints, done, want)
		}
		has := persisted(t, cl)[global] != nil
		if wantHas := step.op == "create" || step.op == "update"; has != wantHas {
			t.Errorf("%d endpoints: lineage persisted %v, want %v", step.endpoints, has, wantHas)
		}
	}
}

// TestLineageHold: an entry whose endpoints cannot be table members this
// time keeps its persisted lineage.
func TestLineageHold(t *testing.T) {
	const key = "10.9.0.2:80/tcp"
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	plan := []*pb.PlanEntry{{Address: "10.9.0.2", Port: 80, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP, Path: pb.DataPath_DATA_PATH_FAST,
		Endpoints: []*pb.Endpoint{{Address: "not an address", Port: 8080}}}}
	want, hold, errs := ls.desired(plan)
	if len(want) != 0 || !hold[key] || len(errs) != 1 || !strings.Contains(errs[0].Error(), "maglev lineage of "+key+": endpoints[0]") {
		t.Fatalf("desired = %v, %v, %v", want, hold, errs)
	}
	var members []maglev.Backend
	for i := range 70 {
		members = append(members, maglev.Backend{Key: fmt.Sprintf("10.0.0.%d:80", i+1), Weight: 1, ID: uint32(i + 1)})
	}
	l, err := ls.next(key, nil, members)
	if err != nil {
		t.Fatal(err)
	}
	data, bin, err := encodeLineage(key, l)
	if err != nil {
		t.Fatal(err)
	}
	cl := lineageClient(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: lineageNS, Name: MaglevLineageConfigMap(key), Labels: map[string]string{LabelMaglevLineage: "true"}},
		Data:       data, BinaryData: bin,
	})
	have, err := readLineages(context.Background(), cl, lineageNS, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done, errs := persistLineages(context.Background(), cl, lineageNS, have, want, hold); len(done) != 0 || len(errs) != 0 {
		t.Errorf("persist = %+v, %v; want nothing done", done, errs)
	}
	if got := persisted(t, cl)[key]; !proto.Equal(got, l) {
		t.Error("the held lineage changed")
	}
}

func TestDecodeLineage(t *testing.T) {
	const key = "192.0.2.10:443/tcp"
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	good, err := ls.next(key, nil, []maglev.Backend{{Key: "10.0.0.1:80", Weight: 1, ID: 1}, {Key: "10.0.0.2:80", Weight: 1, ID: 2}})
	if err != nil {
		t.Fatal(err)
	}
	data, bin, err := encodeLineage(key, good)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bin[MaglevLineageDataKey]); n < 8192 || n > 8300 {
		t.Errorf("two backends: %d bytes, want about 8 KiB (65537 one-bit slots)", n)
	}
	short := proto.Clone(good).(*pb.MaglevLineage)
	short.Slots = short.Slots[1:]
	shortRaw, _ := proto.Marshal(short)
	mk := func(name string, data map[string]string, bin map[string][]byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data, BinaryData: bin}
	}
	name := MaglevLineageConfigMap(key)
	tests := []struct {
		name string
		cm   *corev1.ConfigMap
		want string // substring of the error; empty: valid
	}{
		{"valid", mk(name, data, bin), ""},
		{"no entry", mk(name, nil, bin), "data.entry: empty"},
		{"another entry's name", mk(MaglevLineageConfigMap("192.0.2.10:80/tcp"), data, bin), "is named " + name},
		{"no lineage", mk(name, data, nil), "binaryData.lineage: missing"},
		{"not protobuf", mk(name, data, map[string][]byte{MaglevLineageDataKey: {0xff, 0xff}}), "binaryData.lineage: "},
		{"invalid table", mk(name, data, map[string][]byte{MaglevLineageDataKey: shortRaw}), "slots has"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, l, err := decodeLineage(tc.cm)
			if tc.want == "" {
				if err != nil || k != key || !proto.Equal(l, good) {
					t.Errorf("decode = %q, %v, %v", k, l != nil, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || l != nil {
				t.Errorf("decode error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMaglevLineageConfigMapName(t *testing.T) {
	a, b := MaglevLineageConfigMap("192.0.2.10:443/tcp"), MaglevLineageConfigMap("192.0.2.10:443/udp")
	if a == b || len(a) != len(MaglevLineagePrefix)+16 || !strings.HasPrefix(a, MaglevLineagePrefix) || strings.ToLower(a) != a {
		t.Errorf("names %q, %q", a, b)
	}
	if a != MaglevLineageConfigMap("192.0.2.10:443/tcp") {
		t.Error("not stable")
	}
}

// TestLineageDecoder: a ConfigMap is decoded once per version, and one
// that is gone is forgotten.
func TestLineageDecoder(t *testing.T) {
	ctx := context.Background()
	cl := lineageClient(t)
	ls, err := newLineages()
	if err != nil {
		t.Fatal(err)
	}
	in := lineageInput(70)
	leaderRound(t, cl, ls, in)
	var dec lineageDecoder
	read := func() []persistedLineage {
		t.Helper()
		ps, err := readLineages(ctx, cl, lineageNS, &dec)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	a, b := read(), read()
	if len(a) != 1 || len(b) != 1 || a[0].err != nil || a[0].lineage != b[0].lineage {
		t.Fatalf("a second read of the same version decoded again (or failed): %+v %+v", a, b)
	}
	in.EndpointSlices[0].Endpoints = in.EndpointSlices[0].Endpoints[1:]
	if done, _ := leaderRound(t, cl, ls, in); len(done) != 1 || done[0].op != "update" {
		t.Fatalf("writes %+v, want an update", done)
	}
	c := read()
	if len(c) != 1 || c[0].lineage == a[0].lineage || len(c[0].lineage.GetBackends()) != 69 {
		t.Fatalf("the new version was not decoded: %+v", c)
	}
	in.Services = in.Services[1:]
	if done, _ := leaderRound(t, cl, ls, in); len(done) != 1 || done[0].op != "delete" {
		t.Fatalf("writes %+v, want a delete", done)
	}
	if ps := read(); len(ps) != 0 || len(dec.seen) != 0 {
		t.Errorf("after the delete: %d read, %d remembered", len(ps), len(dec.seen))
	}
}
