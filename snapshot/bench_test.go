package snapshot

import (
	"fmt"
	"strings"
	"testing"
)

// scaleYAML is a configuration of n HTTP routes, each with its own
// hostname, spread over gateways listeners (gateways of one HTTP listener
// each, all on one VIP), the shape perf/routescale and perf/controlplane
// measure.
func scaleYAML(n, gateways int) string {
	var b strings.Builder
	b.WriteString(`apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: bench}
spec: {address: 192.0.2.10/32, mode: Local}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: be, namespace: bench}
spec:
  endpoints: [{address: 192.0.2.20, port: 8080}]
`)
	for g := range gateways {
		fmt.Fprintf(&b, `---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: gw%02d, namespace: bench}
spec:
  vipRef: bench
  listeners: [{name: http, port: %d, protocol: HTTP}]
`, g, 8000+g)
	}
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata: {name: r%05d, namespace: bench}
spec:
  parentRefs: [{name: gw%02d}]
  hostnames: [r%d.bench.test]
  rules:
    - matches: [{path: {type: PathPrefix, value: /api}}, {path: {type: Exact, value: /}}]
      backendRefs: [{name: be}]
`, i, i%gateways, i)
	}
	return b.String()
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
