package main

import (
	"testing"

	"github.com/novaedge/novaedge/snapshot"
)

// TestScaleBuilds: the generated configuration builds completely and
// without errors, so the benchmark times the work it claims to.
func TestScaleBuilds(t *testing.T) {
	tests := []struct {
		name  string
		scale scale
		nodes int
	}{
		{"small", scale{Namespace: "bench", Routes: 30, Backends: 7, Gateways: 3}, 2},
		{"more backends than routes", scale{Namespace: "bench", Routes: 5, Backends: 5, Gateways: 1}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, names := scaleInput(tc.scale, tc.nodes)
			if len(names) != tc.nodes {
				t.Fatalf("got %d node names, want %d", len(names), tc.nodes)
			}
			for _, n := range names {
				snap, diags := snapshot.Build(in, buildOptions(n))
				if err := checkBuilt(tc.scale, snap, len(diags.Errors())); err != nil {
					t.Fatalf("node %s: %v; diagnostics: %v", n, err, diags)
				}
				if got := snap.GetNode().GetNodeName(); got != n {
					t.Errorf("snapshot is for node %q, want %q", got, n)
				}
			}
			if got := len(tc.scale.clientObjects()); got != 1+tc.scale.Gateways+tc.scale.Backends+tc.scale.Routes {
				t.Errorf("clientObjects returned %d objects, want %d", got, 1+tc.scale.Gateways+tc.scale.Backends+tc.scale.Routes)
			}
		})
	}
}

func TestCheckBuiltCatchesShortBuild(t *testing.T) {
	s := scale{Namespace: "bench", Routes: 4, Backends: 2, Gateways: 1}
	in, names := scaleInput(s, 1)
	in.Routes = in.Routes[:3]
	snap, diags := snapshot.Build(in, buildOptions(names[0]))
	if err := checkBuilt(s, snap, len(diags.Errors())); err == nil {
		t.Fatal("checkBuilt accepted a snapshot with 3 of 4 routes")
	}
}
