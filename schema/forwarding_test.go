package schema

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/deploy/crds"
	"github.com/novaedge/novaedge/manifest"
)

// The generated ProxyVIP CRD checks spec.forwarding as the apiserver would:
// enums, the range of guePort, and which settings belong to which mode, each
// rejection naming the field and the fix.
func TestProxyVIPForwardingRules(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	// As in the apiserver, CEL rules are skipped once the schema fails.
	const notChecked = "warning: : some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
	const head = "apiVersion: novaedge.io/v1alpha1\nkind: ProxyVIP\nmetadata: {name: v}\nspec:\n  address: 10.0.0.1\n  mode: Local\n  forwarding:\n"
	tests := []struct {
		name, forwarding string
		want             []string
	}{
		{"empty", "    {}\n", nil},
		{"NAT", "    mode: NAT\n", nil},
		{"NAT keeping the client address", "    mode: NAT\n    preserveClientIP: true\n", nil},
		{"preserveClientIP alone (NAT by default)", "    preserveClientIP: true\n", nil},
		{"preserveClientIP false with DSR", "    mode: DSR\n    preserveClientIP: false\n", nil},
		{"DSR", "    mode: DSR\n", nil},
		{"DSR IPIP", "    mode: DSR\n    encapsulation: IPIP\n", nil},
		{"DSR L2", "    mode: DSR\n    encapsulation: L2\n", nil},
		{"DSR GUE", "    mode: DSR\n    encapsulation: GUE\n", nil},
		{"DSR GUE port", "    mode: DSR\n    encapsulation: GUE\n    guePort: 65535\n", nil},

		{"unknown mode", "    mode: dsr\n", []string{
			`spec.forwarding.mode: Unsupported value: "dsr": supported values: "NAT", "DSR"`,
			notChecked,
		}},
		{"unknown encapsulation", "    mode: DSR\n    encapsulation: VXLAN\n", []string{
			`spec.forwarding.encapsulation: Unsupported value: "VXLAN": supported values: "IPIP", "GUE", "L2"`,
			notChecked,
		}},
		{"preserveClientIP with DSR", "    mode: DSR\n    preserveClientIP: true\n", []string{
			"spec.forwarding.preserveClientIP: Invalid value: preserveClientIP applies only to mode NAT (DSR always keeps the client address): remove preserveClientIP or set mode NAT",
		}},
		{"encapsulation without mode", "    encapsulation: GUE\n", []string{
			"spec.forwarding.encapsulation: Invalid value: encapsulation applies only to mode DSR: set mode DSR or remove encapsulation",
		}},
		{"encapsulation with NAT", "    mode: NAT\n    encapsulation: L2\n", []string{
			"spec.forwarding.encapsulation: Invalid value: encapsulation applies only to mode DSR: set mode DSR or remove encapsulation",
		}},
		{"guePort with NAT", "    mode: NAT\n    guePort: 7000\n", []string{
			"spec.forwarding.guePort: Invalid value: guePort applies only to mode DSR with encapsulation GUE: set mode DSR and encapsulation GUE, or remove guePort",
		}},
		{"guePort with IPIP by default", "    mode: DSR\n    guePort: 7000\n", []string{
			"spec.forwarding.guePort: Invalid value: guePort applies only to encapsulation GUE (DSR defaults to IPIP): set encapsulation GUE or remove guePort",
		}},
		{"guePort with L2", "    mode: DSR\n    encapsulation: L2\n    guePort: 7000\n", []string{
			"spec.forwarding.guePort: Invalid value: guePort applies only to encapsulation GUE (DSR defaults to IPIP): set encapsulation GUE or remove guePort",
		}},
		{"guePort zero", "    mode: DSR\n    encapsulation: GUE\n    guePort: 0\n", []string{
			"spec.forwarding.guePort: Invalid value: 0: guePort must be 1-65535; leave it out for the default 6080",
		}},
		{"guePort too big", "    mode: DSR\n    encapsulation: GUE\n    guePort: 65536\n", []string{
			"spec.forwarding.guePort: Invalid value: 65536: guePort must be 1-65535; leave it out for the default 6080",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := v.Validate(parse(t, head+tc.forwarding).Object)
			if diff := cmp.Diff(tc.want, problems(diags)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// The DSR example users are pointed to passes the CRDs.
func TestDSRExamplePassesTheCRDs(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	const path = "../deploy/examples/dsr.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, diags := manifest.Parse(path, data)
	if len(diags) > 0 || len(docs) == 0 {
		t.Fatalf("parse: %d documents, %v", len(docs), diags)
	}
	for _, d := range docs {
		if _, problems := v.ValidateDocument(d); len(problems) > 0 {
			t.Errorf("%s %s: %v", d.Kind, d.Name, problems)
		}
	}
}
