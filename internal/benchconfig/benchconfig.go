// Package benchconfig writes the standalone configurations the route-scale
// benchmarks load: many HTTP routes, each with a hostname of its own, over
// one VIP, one backend and a few gateways. The snapshot and loader
// benchmarks and perf/routescale share it, so that they measure one shape.
package benchconfig

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Options shape a configuration.
type Options struct {
	// VIP is the ProxyVIP's address (a /32 or /128 is appended).
	VIP netip.Addr
	// Backend is the one ProxyBackend's endpoint.
	Backend netip.AddrPort
	// Ports has one HTTP listener port per gateway ("gw00", "gw01", …);
	// route i attaches to gateway i mod len(Ports).
	Ports []int
	// Routes is how many ProxyRoutes there are.
	Routes int
}

// Host is the hostname of route i.
func Host(i int) string { return "r" + strconv.Itoa(i) + ".bench.test" }

// YAML returns the configuration as one multi-document YAML file, the
// routes last, in order, one document each.
func YAML(o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: bench}
spec: {address: %s/%d, mode: Local}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: be, namespace: bench}
spec:
  endpoints: [{address: %s, port: %d}]
`, o.VIP, o.VIP.BitLen(), o.Backend.Addr(), o.Backend.Port())
	for g, port := range o.Ports {
		fmt.Fprintf(&b, `---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: gw%02d, namespace: bench}
spec:
  vipRef: bench
  listeners: [{name: http, port: %d, protocol: HTTP}]
`, g, port)
	}
	for i := range o.Routes {
		fmt.Fprintf(&b, `---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata: {name: r%05d, namespace: bench}
spec:
  parentRefs: [{name: gw%02d}]
  hostnames: [%s]
  rules:
    - matches: [{path: {type: PathPrefix, value: /api}}, {path: {type: Exact, value: /}}]
      backendRefs: [{name: be}]
`, i, i%max(1, len(o.Ports)), Host(i))
	}
	return b.String()
}
