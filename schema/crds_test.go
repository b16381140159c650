package schema

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/deploy/crds"
	"github.com/novaedge/novaedge/schema/crdcheck"
)

// TestProjectCRDs loads the CRDs controller-gen generates for NovaEdge,
// checking their definitions as the apiserver would (the agent, which
// embeds them, trusts them: schema.CRDCheck), and checks a few resources
// against them, including rules that use the apiserver's CEL IP and CIDR
// libraries.
func TestProjectCRDs(t *testing.T) {
	v, err := NewFromFS(crds.FS, crdcheck.Check)
	if err != nil {
		t.Fatalf("NewFromFS(deploy/crds): %v", err)
	}
	wantKinds := []KindInfo{
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyBackend", Plural: "proxybackends", Namespaced: true},
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyGateway", Plural: "proxygateways", Namespaced: true},
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyIPPool", Plural: "proxyippools"},
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyPolicy", Plural: "proxypolicies", Namespaced: true},
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyRoute", Plural: "proxyroutes", Namespaced: true},
		{APIVersion: "novaedge.io/v1alpha1", Kind: "ProxyVIP", Plural: "proxyvips"},
	}
	if diff := cmp.Diff(wantKinds, v.Kinds()); diff != "" {
		t.Errorf("Kinds (-want +got):\n%s", diff)
	}

	const vip = "apiVersion: novaedge.io/v1alpha1\nkind: ProxyVIP\nmetadata: {name: web}\n"
	const pool = "apiVersion: novaedge.io/v1alpha1\nkind: ProxyIPPool\nmetadata: {name: pool}\n"
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"valid vip", vip + "spec: {mode: L2ARP, address: 10.200.0.10/32, ports: [80, 443]}\n", nil},
		{"valid pool", pool + "spec: {cidrs: [10.200.0.0/24], addresses: [10.200.1.10-10.200.1.20]}\n", nil},
		{"vip problems", vip + "spec: {mode: L2ARP, address: 10.200.0.10/24, ports: [80, 80]}\n", []string{
			`spec.address: Invalid value: "10.200.0.10/24": must be an IPv4 address or an IPv4 /32, e.g. 10.200.0.10/32`,
			"spec.ports[1]: Duplicate value: 80",
		}},
		{"pool address", pool + "spec: {addresses: [nope]}\n", []string{
			`spec.addresses[0]: Invalid value: "nope": must be an address, a host prefix (/32 or /128) or a range start-end of one family`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := v.Validate(parse(t, tc.in).Object)
			if diff := cmp.Diff(tc.want, problems(diags)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}

	// Every kind prunes and reports unknown fields in spec.
	for _, k := range v.Kinds() {
		obj := map[string]any{
			"apiVersion": k.APIVersion, "kind": k.Kind,
			"metadata": map[string]any{"name": "x", "namespace": "default"},
			"spec":     map[string]any{"surelyNotAField": true},
		}
		_, diags := v.Validate(obj)
		if !slices.Contains(problems(diags), `spec.surelyNotAField: unknown field "spec.surelyNotAField"`) {
			t.Errorf("%s: unknown field not reported in %q", k.Kind, problems(diags))
		}
	}
}
