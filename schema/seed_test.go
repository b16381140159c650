package schema

import (
	"os"
	"testing"

	"github.com/novaedge/novaedge/deploy/crds"
	"github.com/novaedge/novaedge/manifest"
)

// Every example document of the seed (re-indented in
// testdata/seed-examples.yaml, a copy of ../shared/seeds/examples.yaml) is
// accepted by the generated CRDs: the seed's shapes are the user-facing API.
func TestSeedExamplesPassTheCRDs(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/seeds/seed-examples.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, diags := manifest.Parse("seed-examples.yaml", data)
	if len(diags) > 0 {
		t.Fatalf("parse: %v", diags)
	}
	if len(docs) != 13 {
		t.Fatalf("got %d documents, the seed has 13", len(docs))
	}
	for _, d := range docs {
		if _, problems := v.ValidateDocument(d); problems.HasErrors() {
			t.Errorf("%s %s rejected:\n%v", d.Kind, d.Name, problems.Err())
		}
	}
}

// The CRDs reject what the acceptance names, each with its field.
func TestCRDsRejectBadFields(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, doc, field string
	}{
		{name: "unknown field", field: "spec.colour", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: b, namespace: demo}
spec:
  colour: blue
  endpoints: [{address: 127.0.0.1, port: 80}]`},
		{name: "invalid CIDR", field: "spec.cidrs[0]", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyIPPool
metadata: {name: p}
spec:
  cidrs: ["10.300.0.0/24"]`},
		{name: "CIDR with host bits", field: "spec.cidrs[0]", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyIPPool
metadata: {name: p}
spec:
  cidrs: ["10.0.0.1/24"]`},
		{name: "port 70000", field: "spec.listeners[0].port", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: g, namespace: demo}
spec:
  listeners: [{name: tcp, port: 70000, protocol: TCP}]`},
		{name: "BGP without bgpConfig", field: "spec.bgpConfig", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: v}
spec:
  mode: BGP
  address: 10.0.0.1`},
		{name: "neither address nor pool", field: "spec", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: v}
spec:
  mode: L2ARP`},
		{name: "bad duration", field: "spec.healthCheck.interval", doc: `
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: b, namespace: demo}
spec:
  endpoints: [{address: 127.0.0.1, port: 80}]
  healthCheck: {interval: 10 seconds}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, diags := manifest.Parse("t.yaml", []byte(tc.doc))
			if len(diags) > 0 || len(docs) != 1 {
				t.Fatalf("parse: %v", diags)
			}
			_, problems := v.ValidateDocument(docs[0])
			found := false
			for _, p := range problems.Errors() {
				if p.Field == tc.field {
					found = true
				}
			}
			if !found {
				t.Errorf("no error on %s; got:\n%v", tc.field, problems)
			}
		})
	}
}
