package loader

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/deploy/examples"
	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/snapshot"
)

// lines renders diagnostics the way novaedgectl prints them, sorted.
func lines(l diag.List) []string {
	l = append(diag.List(nil), l...)
	l.Sort()
	var out []string
	for _, d := range l {
		out = append(out, d.String())
	}
	return out
}

// inputJSON is in encoded, to compare Inputs whole.
func inputJSON(t *testing.T, in *snapshot.Input) string {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// counts summarises an Input as the number of objects of each kind.
func counts(in *snapshot.Input) map[string]int {
	m := map[string]int{
		"ProxyVIP": len(in.VIPs), "ProxyIPPool": len(in.Pools), "ProxyGateway": len(in.Gateways),
		"ProxyRoute": len(in.Routes), "ProxyBackend": len(in.Backends), "ProxyPolicy": len(in.Policies),
		"Secret": len(in.Secrets), "Service": len(in.Services), "EndpointSlice": len(in.EndpointSlices),
		"Namespace": len(in.Namespaces), "Ingress": len(in.Ingresses), "Gateway": len(in.APIGateways),
		"HTTPRoute": len(in.HTTPRoutes),
	}
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
		want  []string       // diagnostics, sorted
		kept  map[string]int // objects in the Input by kind
	}{
		{
			name:  "every supported kind",
			paths: []string{"testdata/kinds.yaml"},
			want: []string{
				"testdata/kinds.yaml:14: warning: ProxyVIP vip: metadata.namespace: ignored: ProxyVIP is cluster-scoped",
			},
			kept: map[string]int{
				"ProxyVIP": 1, "ProxyIPPool": 1, "ProxyGateway": 1, "ProxyRoute": 1, "ProxyBackend": 1, "ProxyPolicy": 1,
				"Secret": 1, "Service": 1, "EndpointSlice": 1, "Namespace": 1, "Ingress": 1, "Gateway": 1, "HTTPRoute": 1,
			},
		},
		{
			name:  "unknown kinds name apiVersion and kind at the kind line",
			paths: []string{"testdata/unknown-kinds.yaml"},
			want: []string{
				`testdata/unknown-kinds.yaml:2: error: Deployment web: kind: unsupported kind "Deployment" in apiVersion "apps/v1"; supported apiVersions: novaedge.io/v1alpha1, v1, discovery.k8s.io/v1, networking.k8s.io/v1, gateway.networking.k8s.io/v1`,
				`testdata/unknown-kinds.yaml:7: error: ProxyListener l: kind: unsupported kind "ProxyListener" in apiVersion "novaedge.io/v1alpha1"; supported kinds of novaedge.io/v1alpha1: ProxyVIP, ProxyIPPool, ProxyGateway, ProxyRoute, ProxyBackend, ProxyPolicy`,
				`testdata/unknown-kinds.yaml:12: error: ProxyVIP v: kind: unsupported kind "ProxyVIP" in apiVersion "novaedge.io/v1beta1"; supported kinds of novaedge.io/v1alpha1: ProxyVIP, ProxyIPPool, ProxyGateway, ProxyRoute, ProxyBackend, ProxyPolicy`,
				`testdata/unknown-kinds.yaml:17: error: List items: kind: unsupported kind "List" in apiVersion "v1"; lists are not read: write one resource per document, separated by "---" lines`,
			},
			kept: map[string]int{"ProxyBackend": 1},
		},
		{
			name:  "duplicates: the second is rejected, naming both positions",
			paths: []string{"testdata/dup"},
			want: []string{
				"testdata/dup/b.yaml:5: error: ProxyBackend default/web: metadata.name: duplicate: ProxyBackend default/web is already defined at testdata/dup/a.yaml:4; this definition is ignored",
				"testdata/dup/b.yaml:21: error: ProxyVIP vip: metadata.name: duplicate: ProxyVIP vip is already defined at testdata/dup/b.yaml:13; this definition is ignored",
			},
			kept: map[string]int{"ProxyBackend": 2, "Service": 1, "ProxyVIP": 1},
		},
		{
			name:  "the same file twice is all duplicates",
			paths: []string{"testdata/locate.yaml", "testdata/locate.yaml"},
			want: []string{
				"testdata/locate.yaml:4: error: ProxyRoute apps/web: metadata.name: duplicate: ProxyRoute apps/web is already defined at testdata/locate.yaml:4; this definition is ignored",
				"testdata/locate.yaml:15: error: ProxyGateway apps/gw: metadata.name: duplicate: ProxyGateway apps/gw is already defined at testdata/locate.yaml:15; this definition is ignored",
				"testdata/locate.yaml:23: error: ProxyBackend apps/web: metadata.name: duplicate: ProxyBackend apps/web is already defined at testdata/locate.yaml:23; this definition is ignored",
			},
			kept: map[string]int{"ProxyRoute": 1, "ProxyGateway": 1, "ProxyBackend": 1},
		},
		{
			name:  "NovaEdge kinds are checked like the apiserver does, the valid document kept",
			paths: []string{"testdata/crd-errors.yaml"},
			want: []string{
				`testdata/crd-errors.yaml:8: error: ProxyBackend default/unknown-field: spec.lbPolcy: unknown field "spec.lbPolcy"`,
				"testdata/crd-errors.yaml:17: error: ProxyGateway default/port-range: spec.listeners[0].port: Invalid value: 70000: spec.listeners[0].port in body should be less than or equal to 65535",
				`testdata/crd-errors.yaml:27: error: ProxyIPPool bad-cidr: spec.cidrs[1]: Invalid value: "10.300.0.0/24": must be a CIDR with no host bits set, e.g. 10.200.0.0/24`,
				"testdata/crd-errors.yaml:33: error: ProxyVIP cel: spec.bgpConfig: Invalid value: bgpConfig is required when mode is BGP",
				"testdata/crd-errors.yaml:45: warning: ProxyGateway default/types: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
				`testdata/crd-errors.yaml:52: error: ProxyGateway default/types: spec.listeners[0].port: Invalid value: "string": spec.listeners[0].port in body must be of type integer: "string"`,
			},
			kept: map[string]int{"ProxyBackend": 1},
		},
		{
			name:  "core and Gateway API kinds are decoded strictly and checked",
			paths: []string{"testdata/core-errors.yaml"},
			want: []string{
				`testdata/core-errors.yaml:6: error: Secret default/bad-base64: data[ca.crt]: Invalid value: "<value omitted>": must be base64-encoded (use stringData for plain text): illegal base64 data at input byte 3`,
				"testdata/core-errors.yaml:8: error: Secret default/tls-without-key: data[tls.key]: Required value: a kubernetes.io/tls Secret needs tls.crt and tls.key",
				`testdata/core-errors.yaml:19: error: Service default/Bad_Name: metadata.name: Invalid value: "Bad_Name": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`,
				"testdata/core-errors.yaml:23: error: Service default/Bad_Name: spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive",
				`testdata/core-errors.yaml:32: error: Service default/types: spec.ports[1].port: Invalid value: "eighty": must be of type integer`,
				`testdata/core-errors.yaml:39: error: Service default/unknown: spec.portz: unknown field "spec.portz"`,
				`testdata/core-errors.yaml:47: error: EndpointSlice default/slice: endpoints[0].addresses[1]: Invalid value: "fd00::1": must be an IPv4 address (addressType)`,
				`testdata/core-errors.yaml:47: error: EndpointSlice default/slice: endpoints[0].addresses[2]: Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
				`testdata/core-errors.yaml:54: error: HTTPRoute default/route: spec.parentRef: unknown field "spec.parentRef"`,
				`testdata/core-errors.yaml:67: error: Secret default/data-not-a-map: data: Invalid value: "x": must be of type object`,
				`testdata/core-errors.yaml:76: error: Service default/named-type: spec.type: Invalid value: ["LoadBalancer"]: must not be an array`,
			},
			kept: map[string]int{"Secret": 1},
		},
		{
			name:  "manifest problems are passed on",
			paths: []string{"testdata/missing.yaml"},
			want:  []string{"testdata/missing.yaml: error: stat testdata/missing.yaml: no such file or directory"},
			kept:  map[string]int{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := Load(tc.paths...)
			if diff := cmp.Diff(tc.want, lines(diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.kept, counts(res.Input)); diff != "" {
				t.Errorf("objects kept (-want +got):\n%s", diff)
			}
			for _, d := range diags {
				if d.Pos.File == "" || (d.Pos.Line == 0 && d.Resource.Kind != "") {
					t.Errorf("diagnostic without a position: %s", d)
				}
			}
		})
	}
}

// TestLoadDecodes checks what the loader does to objects on the way:
// namespaces defaulted, stringData merged, cluster-scoped namespaces cleared.
func TestLoadDecodes(t *testing.T) {
	res, _ := Load("testdata/kinds.yaml")
	in := res.Input
	if len(in.Secrets) != 1 || len(in.VIPs) != 1 || len(in.Routes) != 1 || len(in.Backends) != 1 || len(in.HTTPRoutes) != 1 || len(in.Ingresses) != 1 {
		t.Fatalf("unexpected input: %v", counts(in))
	}
	s := in.Secrets[0]
	if got := map[string]string{"tls.crt": string(s.Data["tls.crt"]), "tls.key": string(s.Data["tls.key"])}; !cmp.Equal(got, map[string]string{"tls.crt": "cert", "tls.key": "key"}) {
		t.Errorf("Secret data = %v, want tls.crt from data and tls.key from stringData", got)
	}
	if s.StringData != nil {
		t.Errorf("Secret stringData = %v, want nil after merging", s.StringData)
	}
	for _, c := range []struct{ kind, got, want string }{
		{"Secret", s.Namespace, "default"},
		{"ProxyBackend", in.Backends[0].Namespace, "default"},
		{"ProxyRoute", in.Routes[0].Namespace, "default"},
		{"HTTPRoute", in.HTTPRoutes[0].Namespace, "default"},
		{"Ingress", in.Ingresses[0].Namespace, "apps"},
		{"ProxyVIP", in.VIPs[0].Namespace, ""},
	} {
		if c.got != c.want {
			t.Errorf("%s namespace = %q, want %q", c.kind, c.got, c.want)
		}
	}
	if got := in.Backends[0].Spec.ServiceRef; got == nil || got.Name != "web" || got.Port != 80 {
		t.Errorf("ProxyBackend serviceRef = %+v, want web:80", got)
	}
	if got := in.HTTPRoutes[0].Spec.ParentRefs; len(got) != 1 || got[0].Name != "api-gw" {
		t.Errorf("HTTPRoute parentRefs = %+v", got)
	}
}

// TestLocate checks that diagnostics of the snapshot build, which carry a
// resource and a field only, get the file and line of that field.
func TestLocate(t *testing.T) {
	res, diags := Load("testdata/locate.yaml")
	if len(diags) != 0 {
		t.Fatalf("Load: %v", lines(diags))
	}
	built := diag.List{
		{Severity: diag.Error, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "apps", Name: "web"}, Field: "spec.rules[0].backendRefs[1].name", Message: "not found"},
		{Severity: diag.Warning, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "apps", Name: "web"}, Message: "whole resource"},
		{Severity: diag.Warning, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "apps", Name: "web"}, Field: "spec.parentRefs", Message: "missing field: its parent"},
		{Severity: diag.Error, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "other", Name: "web"}, Message: "not from a file"},
		{Severity: diag.Error, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "apps", Name: "web"}, Message: "already placed", Pos: diag.Position{File: "elsewhere.yaml", Line: 3}},
	}
	res.Locate(built)
	got := make([]string, len(built))
	for i, d := range built {
		got[i] = d.Pos.String()
	}
	want := []string{"testdata/locate.yaml:10", "testdata/locate.yaml:1", "testdata/locate.yaml:6", "", "elsewhere.yaml:3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("positions (-want +got):\n%s", diff)
	}

	// End to end with the builder.
	_, built = snapshot.Build(res.Input, snapshot.Options{Node: snapshot.Node{Name: "n"}})
	res.Locate(built)
	found := false
	for _, d := range built {
		if d.Field == "spec.rules[0].backendRefs[1].name" {
			found = true
			if d.Pos.String() != "testdata/locate.yaml:10" {
				t.Errorf("builder diagnostic %q at %q, want testdata/locate.yaml:10", d, d.Pos)
			}
		}
	}
	if !found {
		t.Errorf("builder did not report the missing backend: %v", lines(built))
	}
}

// TestExamples loads the shipped examples: the standalone example builds
// without a single diagnostic.
func TestExamples(t *testing.T) {
	res, diags := Load("../deploy/examples/standalone.yaml")
	_, built := snapshot.Build(res.Input, snapshot.Options{Node: snapshot.Node{Name: "demo"}})
	res.Locate(built)
	if all := append(diags, built...); len(all) != 0 {
		t.Errorf("standalone example: want no diagnostics, got:\n%v", lines(all))
	}
}

// FuzzFromDocuments feeds arbitrary YAML through manifest.Parse and the
// loader: it must not panic, and every diagnostic about a document must
// carry the file name.
func FuzzFromDocuments(f *testing.F) {
	for _, p := range []string{"testdata/kinds.yaml", "testdata/core-errors.yaml", "testdata/crd-errors.yaml", "testdata/unknown-kinds.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {a: [1]}\n"))
	f.Add([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: [1]}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, _ := manifest.Parse("in.yaml", data)
		res, diags := FromDocuments(docs)
		if res == nil || res.Input == nil {
			t.Fatal("nil result")
		}
		for _, d := range diags {
			if d.Pos.File != "in.yaml" {
				t.Errorf("diagnostic without file: %s", d)
			}
		}
		res.Locate(diags)
	})
}

// TestEmbeddedExample loads the embedded copy the agent uses as its
// default, through FromDocuments.
func TestEmbeddedExample(t *testing.T) {
	docs, diags := manifest.Parse(examples.StandaloneName, examples.Standalone)
	res, more := FromDocuments(docs)
	if all := append(diags, more...); len(all) != 0 || len(res.Input.VIPs) != 1 || len(res.Input.Backends) != 3 {
		t.Errorf("embedded example: %d VIPs, %d backends, diagnostics %v", len(res.Input.VIPs), len(res.Input.Backends), lines(all))
	}
}

// TestLoadStreams: Load, which checks each document as it is parsed, gives
// what FromDocuments gives for the documents manifest.Load returns (objects,
// diagnostics in the same order, positions of later diagnostics), and keeps
// the documents detached.
func TestLoadStreams(t *testing.T) {
	tests := []struct {
		name  string
		paths []string
	}{
		{"every kind", []string{"testdata/kinds.yaml"}},
		{"errors", []string{"testdata/crd-errors.yaml", "testdata/core-errors.yaml", "testdata/unknown-kinds.yaml"}},
		{"duplicates", []string{"testdata/dup", "testdata/locate.yaml", "testdata/locate.yaml"}},
		{"example", []string{"../deploy/examples/standalone.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := Load(tc.paths...)
			docs, want := manifest.Load(tc.paths...)
			ref, more := FromDocuments(docs)
			want = append(want, more...)
			if diff := cmp.Diff(diagStrings(want), diagStrings(diags)); diff != "" {
				t.Errorf("diagnostics (-FromDocuments +Load):\n%s", diff)
			}
			if got, exp := inputJSON(t, res.Input), inputJSON(t, ref.Input); got != exp {
				t.Errorf("inputs differ:\nLoad:          %s\nFromDocuments: %s", got, exp)
			}
			if len(res.docs) == 0 || len(res.docs) != len(ref.docs) {
				t.Fatalf("Load kept %d documents, FromDocuments %d", len(res.docs), len(ref.docs))
			}
			for r, d := range res.docs {
				if d.Object != nil {
					t.Errorf("%s: the document kept for positions still holds its object", r)
				}
				for _, f := range []string{"", "metadata.name", "spec", "spec.rules[0].backendRefs[1].name", "spec.endpoints[0].port"} {
					if got, want := res.Position(r, f), ref.Position(r, f); got != want {
						t.Errorf("%s: Position(%q) = %s, want %s", r, f, got, want)
					}
				}
			}
		})
	}
}

func diagStrings(l diag.List) []string {
	var out []string
	for _, d := range l {
		out = append(out, d.String())
	}
	return out
}
