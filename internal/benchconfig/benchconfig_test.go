package benchconfig

import (
	"net/netip"
	"strings"
	"testing"
)

func TestYAML(t *testing.T) {
	y := YAML(Options{VIP: netip.MustParseAddr("192.0.2.10"), Backend: netip.MustParseAddrPort("192.0.2.20:8080"), Ports: []int{8000, 8001}, Routes: 3})
	for _, want := range []string{
		"address: 192.0.2.10/32", "address: 192.0.2.20, port: 8080",
		"name: gw00, namespace: bench}\nspec:\n  vipRef: bench\n  listeners: [{name: http, port: 8000",
		"name: gw01, namespace: bench}\nspec:\n  vipRef: bench\n  listeners: [{name: http, port: 8001",
		"name: r00000, namespace: bench}\nspec:\n  parentRefs: [{name: gw00}]\n  hostnames: [r0.bench.test]",
		"name: r00001, namespace: bench}\nspec:\n  parentRefs: [{name: gw01}]\n  hostnames: [r1.bench.test]",
		"name: r00002, namespace: bench}\nspec:\n  parentRefs: [{name: gw00}]\n  hostnames: [r2.bench.test]",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("no %q in:\n%s", want, y)
		}
	}
	if got := strings.Count(y, "kind: ProxyRoute\n"); got != 3 {
		t.Errorf("%d routes, want 3", got)
	}
	if v6 := YAML(Options{VIP: netip.MustParseAddr("2001:db8::1"), Backend: netip.MustParseAddrPort("[2001:db8::2]:80"), Ports: []int{80}}); !strings.Contains(v6, "address: 2001:db8::1/128") {
		t.Errorf("IPv6 VIP not a /128:\n%s", v6)
	}
}
