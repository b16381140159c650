package snapshot

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/novaedge/novaedge/internal/benchconfig"
)

// scaleYAML is a configuration of n HTTP routes, each with its own
// hostname, spread over gateways listeners (gateways of one HTTP listener
// each, all on one VIP), the shape perf/routescale and perf/controlplane
// measure.
func scaleYAML(n, gateways int) string {
	ports := make([]int, gateways)
	for g := range ports {
		ports[g] = 8000 + g
	}
	return benchconfig.YAML(benchconfig.Options{
		VIP: netip.MustParseAddr("192.0.2.10"), Backend: netip.MustParseAddrPort("192.0.2.20:8080"), Ports: ports, Routes: n,
	})
}

// BenchmarkBuild builds a node's snapshot of many routes, as the
// standalone agent does on every change of its files and the controller
// for every node on every change.
func BenchmarkBuild(b *testing.B) {
	for _, tc := range []struct{ routes, gateways int }{{3000, 1}, {10000, 10}} {
		b.Run(fmt.Sprintf("routes=%d/gateways=%d", tc.routes, tc.gateways), func(b *testing.B) {
			in := parseInput(b, "scale", []byte(scaleYAML(tc.routes, tc.gateways)))
			s, diags := Build(in, Options{Node: Node{Name: "edge-1"}})
			if len(diags) > 0 {
				b.Fatalf("diagnostics: %v", diags)
			}
			if got := len(s.GetCluster().GetRoutes()); got != tc.routes {
				b.Fatalf("%d routes built, want %d", got, tc.routes)
			}
			b.ReportAllocs()
			for b.Loop() {
				Build(in, Options{Node: Node{Name: "edge-1"}})
			}
		})
	}
}

// BenchmarkBuildMemo builds 3000 routes and then 3000 plus one new route,
// in turn, with a Memo: what a standalone agent builds after an edit that
// adds a route, every other route object unchanged (the loader's reuse).
// "cache" lists the routes in a new random order each time, as a
// controller's informer cache does, "files" in the files' order.
func BenchmarkBuildMemo(b *testing.B) {
	in := parseInput(b, "scale", []byte(scaleYAML(3001, 1)))
	fewer := *in
	fewer.Routes = in.Routes[:3000:3000]
	for _, order := range []string{"files", "cache"} {
		b.Run("order="+order, func(b *testing.B) {
			inputs := []*Input{in, &fewer}
			if order == "cache" {
				rnd := rand.New(rand.NewPCG(1, 2))
				inputs = nil
				for i := range 4 {
					next := *in
					if i%2 == 1 {
						next = fewer
					}
					next.Routes = slices.Clone(next.Routes)
					rnd.Shuffle(len(next.Routes), func(i, j int) { next.Routes[i], next.Routes[j] = next.Routes[j], next.Routes[i] })
					inputs = append(inputs, &next)
				}
			}
			m := &Memo{}
			Build(in, Options{Node: Node{Name: "edge-1"}, Memo: m})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				next := inputs[i%len(inputs)]
				s, _ := Build(next, Options{Node: Node{Name: "edge-1"}, Memo: m})
				if got := len(s.GetCluster().GetRoutes()); got != len(next.Routes) {
					b.Fatalf("%d routes built, want %d", got, len(next.Routes))
				}
			}
		})
	}
}
