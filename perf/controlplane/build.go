package main

import (
	"fmt"
	"runtime"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// buildResult is the cost of building one configuration's snapshots.
type buildResult struct {
	Scale scale
	// Builds is how many single builds Build and Marshal are medians of.
	Builds int
	// Build and Marshal are medians of one snapshot.Build and one
	// proto.Marshal of its result.
	Build, Marshal time.Duration
	// Size is the encoded size of one node's snapshot.
	Size int
	// AllocPerBuild is the heap allocated by one Build.
	AllocPerBuild uint64
	// Nodes is how many nodes' snapshots PerNodes builds in a row, as the
	// controller's publisher does; PerNodes is the median of NodeRounds
	// such rounds.
	Nodes, NodeRounds int
	PerNodes          time.Duration
	// PerNodesShared is the same nodes' snapshots from one
	// snapshot.BuildShared, as the publisher builds them.
	PerNodesShared time.Duration
}

// scaleInput is the snapshot input of s with nodes Ready nodes, the VIP
// served on all of them as the leader would decide it.
func scaleInput(s scale, nodes int) (*snapshot.Input, []string) {
	vip, gws, bes, routes := s.objects()
	in := &snapshot.Input{VIPs: []v1alpha1.ProxyVIP{*vip}}
	for _, g := range gws {
		in.Gateways = append(in.Gateways, *g)
	}
	for _, b := range bes {
		in.Backends = append(in.Backends, *b)
	}
	for _, r := range routes {
		in.Routes = append(in.Routes, *r)
	}
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
		in.Nodes = append(in.Nodes, readyNode(names[i]))
	}
	in.Namespaces = []corev1.Namespace{{}}
	in.Namespaces[0].Name = s.Namespace
	in.Decisions = &snapshot.Decisions{Assignments: map[string]snapshot.Assignment{vipName: {Announcing: names}}}
	return in, names
}

// buildOptions are the options the controller's publisher builds with.
func buildOptions(node string) snapshot.Options {
	return snapshot.Options{Node: snapshot.Node{Name: node}, ClusterComplete: true}
}

// checkBuilt fails when snap does not hold what s generated, so the
// benchmark never times a build that dropped half of its input.
func checkBuilt(s scale, snap *pb.ConfigSnapshot, errs int) error {
	if errs > 0 {
		return fmt.Errorf("the generated configuration has %d error diagnostics", errs)
	}
	c := snap.GetCluster()
	if got := len(c.GetRoutes()); got != s.Routes {
		return fmt.Errorf("built %d routes, want %d", got, s.Routes)
	}
	if got := len(c.GetBackends()); got != s.Backends {
		return fmt.Errorf("built %d backends, want %d", got, s.Backends)
	}
	if got := len(c.GetListeners()); got != s.Gateways {
		return fmt.Errorf("built %d listeners, want %d", got, s.Gateways)
	}
	if got := len(snap.GetNode().GetVips()); got != 1 {
		return fmt.Errorf("the node part serves %d VIPs, want 1", got)
	}
	return nil
}

// measureBuild times snapshot.Build of s for one node (builds times),
// proto.Marshal of the result, and rounds builds of nodes nodes' snapshots.
func measureBuild(s scale, builds, nodes, rounds int) (*buildResult, error) {
	in, names := scaleInput(s, nodes)
	snap, diags := snapshot.Build(in, buildOptions(names[0]))
	if err := checkBuilt(s, snap, len(diags.Errors())); err != nil {
		return nil, err
	}
	res := &buildResult{Scale: s, Builds: builds, Size: proto.Size(snap), Nodes: nodes, NodeRounds: rounds}

	// A warm-up build: the first one pays for growing the heap.
	snapshot.Build(in, buildOptions(names[0]))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ds := make([]time.Duration, builds)
	for i := range ds {
		start := time.Now()
		snapshot.Build(in, buildOptions(names[0]))
		ds[i] = time.Since(start)
	}
	runtime.ReadMemStats(&after)
	res.Build = median(ds)
	res.AllocPerBuild = (after.TotalAlloc - before.TotalAlloc) / uint64(builds)

	ms := make([]time.Duration, builds)
	for i := range ms {
		start := time.Now()
		if _, err := proto.Marshal(snap); err != nil {
			return nil, fmt.Errorf("marshal the snapshot: %w", err)
		}
		ms[i] = time.Since(start)
	}
	res.Marshal = median(ms)

	rs := make([]time.Duration, rounds)
	for i := range rs {
		start := time.Now()
		for _, n := range names {
			snapshot.Build(in, buildOptions(n))
		}
		rs[i] = time.Since(start)
	}
	res.PerNodes = median(rs)

	// The publisher's way: one build, each node's part on top of it.
	shared := make([]snapshot.Node, len(names))
	for i, n := range names {
		shared[i] = snapshot.Node{Name: n}
	}
	for i := range rs {
		start := time.Now()
		snaps, _ := snapshot.BuildShared(in, buildOptions("(none)"), shared)
		rs[i] = time.Since(start)
		if len(snaps) != len(names) || snaps[0].GetContentHash() != snap.GetContentHash() {
			return nil, fmt.Errorf("BuildShared returned %d snapshots for %d nodes, the first not Build's", len(snaps), len(names))
		}
	}
	res.PerNodesShared = median(rs)
	return res, nil
}
