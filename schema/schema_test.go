package schema

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/schema/crdcheck"
)

func testValidator(t *testing.T) *Validator {
	t.Helper()
	v, err := NewFromFS(os.DirFS("testdata"), crdcheck.Check)
	if err != nil {
		t.Fatalf("NewFromFS(testdata): %v", err)
	}
	return v
}

// parse reads a single document.
func parse(t *testing.T, in string) manifest.Document {
	t.Helper()
	docs, diags := manifest.Parse("in.yaml", []byte(in))
	if len(docs) != 1 || diags.HasErrors() {
		t.Fatalf("manifest.Parse: %d documents, %v", len(docs), diags)
	}
	return docs[0]
}

// problems renders diagnostics as "field: message", warnings marked.
func problems(l diag.List) []string {
	var out []string
	for _, d := range l {
		s := d.Field + ": " + d.Message
		if d.Severity == diag.Warning {
			s = "warning: " + s
		}
		out = append(out, s)
	}
	return out
}

const (
	vipHead = "apiVersion: example.novaedge.io/v1alpha1\nkind: TestVIP\nmetadata:\n  name: vip\n"
	// vipSpec is a valid spec, to which cases append fields.
	vipSpec = "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n  ports:\n    - port: 80\n"
	rtHead  = "apiVersion: example.novaedge.io/v1alpha1\nkind: TestRoute\nmetadata:\n  name: rt\n"
)

func TestValidateProblems(t *testing.T) {
	const celSkipped = "warning: : " + celSkipped
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"valid", vipHead + vipSpec, nil},
		{"enum", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: Foo\n  ports: [{port: 80}]\n", []string{
			`spec.mode: Unsupported value: "Foo": supported values: "L2ARP", "BGP"`,
			celSkipped,
		}},
		{"maximum", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n  ports: [{port: 70000}]\n", []string{
			"spec.ports[0].port: Invalid value: 70000: spec.ports[0].port in body should be less than or equal to 65535",
		}},
		{"minimum", rtHead + "spec:\n  rules: [{backendRefs: [{name: a, weight: -1}]}]\n", []string{
			"spec.rules[0].backendRefs[0].weight: Invalid value: -1: spec.rules[0].backendRefs[0].weight in body should be greater than or equal to 0",
		}},
		{"pattern", vipHead + "spec:\n  address: 192.0.2.1\n  mode: BGP\n  ports: [{port: 80}]\n", []string{
			`spec.address: Invalid value: "192.0.2.1": spec.address in body should match '^[0-9.]+/[0-9]+$'`,
		}},
		{"required", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n", []string{
			"spec.ports: Required value",
			celSkipped,
		}},
		{"required in nested list", rtHead + "spec:\n  rules:\n    - backendRefs: [{weight: 2}]\n    - {}\n", []string{
			"spec.rules[0].backendRefs[0].name: Required value",
			"spec.rules[1].backendRefs: Required value",
			celSkipped,
		}},
		{"min items", rtHead + "spec:\n  rules: [{backendRefs: []}]\n", []string{
			"spec.rules[0].backendRefs: Invalid value: 0: spec.rules[0].backendRefs in body should have at least 1 items",
		}},
		{"max items", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n  ports: [{port: 1}, {port: 2}, {port: 3}, {port: 4}, {port: 5}]\n", []string{
			"spec.ports: Too many: 5: must have at most 4 items",
			celSkipped,
		}},
		{"max length", rtHead + "spec:\n  rules: [{backendRefs: [{name: " + strings.Repeat("a", 64) + "}]}]\n", []string{
			"spec.rules[0].backendRefs[0].name: Too long: may not be more than 63 bytes",
			celSkipped,
		}},
		{"wrong type", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n  ports: [{port: \"80\"}]\n", []string{
			`spec.ports[0].port: Invalid value: "string": spec.ports[0].port in body must be of type integer: "string"`,
			celSkipped,
		}},
		{"map value type", vipHead + vipSpec + "  nodeSelector:\n    node-role.kubernetes.io/edge: true\n", []string{
			`spec.nodeSelector.node-role.kubernetes.io/edge: Invalid value: "boolean": spec.nodeSelector.node-role.kubernetes.io/edge in body must be of type string: "boolean"`,
			celSkipped,
		}},
		{"duration format", vipHead + vipSpec + "  healthCheck:\n    interval: 10x\n", []string{
			`spec.healthCheck.interval: Invalid value: "10x": spec.healthCheck.interval in body must be of type duration: "10x"`,
			celSkipped, // a format error is a type error to the apiserver
		}},
		{"list map duplicate", vipHead + "spec:\n  address: 192.0.2.1/32\n  mode: BGP\n  ports: [{port: 80}, {port: 80, protocol: UDP}]\n", []string{
			`spec.ports[1]: Duplicate value: {"port":80}`,
		}},
		{"unknown fields", vipHead + "  color: blue\n" + vipSpec + "    - port: 81\n      junk: 1\n  extra: {a: 1}\nfoo: bar\n", []string{
			`foo: unknown field "foo"`,
			`metadata.color: unknown field "metadata.color"`,
			`spec.extra: unknown field "spec.extra"`,
			`spec.ports[1].junk: unknown field "spec.ports[1].junk"`,
		}},
		{"cel cross-field rule, both", vipHead + vipSpec + "  poolRef: pool\n", []string{
			"spec: Invalid value: exactly one of address or poolRef must be set",
		}},
		{"cel cross-field rule, neither", vipHead + "spec:\n  mode: BGP\n  ports: [{port: 80}]\n", []string{
			"spec: Invalid value: exactly one of address or poolRef must be set",
		}},
		{"cel rule on durations", vipHead + vipSpec + "  healthCheck: {interval: 5s, timeout: 5s}\n", []string{
			"spec.healthCheck: Invalid value: timeout must be shorter than interval",
		}},
		{"cel rule sees defaults", vipHead + vipSpec + "  healthCheck: {timeout: 1m}\n", []string{
			"spec.healthCheck: Invalid value: timeout must be shorter than interval",
		}},
		{"cel message expression", rtHead + "spec:\n  hostnames: [ok.example, Bad.example]\n", []string{
			`spec.hostnames[1]: Invalid value: "Bad.example": hostname Bad.example must be lower case`,
		}},
		{"metadata name", "apiVersion: example.novaedge.io/v1alpha1\nkind: TestVIP\nmetadata:\n  name: Web_1\n" + vipSpec, []string{
			`metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}},
		{"namespace on cluster-scoped kind", vipHead + "  namespace: shop\n" + vipSpec, []string{
			"metadata.namespace: Forbidden: not allowed on this type",
		}},
		{"malformed metadata field", vipHead + "  labels: {tier: 1}\n" + vipSpec, []string{
			`metadata.labels: Invalid value: {"tier":1}: cannot unmarshal number into Go struct field ObjectMeta.labels of type string`,
		}},
		{"status subresource", vipHead + vipSpec + "status:\n  address: 192.0.2.1\n  other: x\n", []string{
			"warning: status: ignored: status is written by the system, not read from resources",
			`status.other: unknown field "status.other"`,
		}},
		{"unknown version", "apiVersion: example.novaedge.io/v1\nkind: TestVIP\nmetadata: {name: x}\n", []string{
			`kind: no matches for kind "TestVIP" in version "example.novaedge.io/v1"; known kinds: TestRoute (example.novaedge.io/v1alpha1), TestVIP (example.novaedge.io/v1alpha1)`,
		}},
		{"unknown group", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", []string{
			`kind: no matches for kind "ConfigMap" in version "v1"`,
		}},
		{"every problem at once", vipHead + "  namespace: shop\n" + vipSpec + "    - port: 0\n    - port: 0\n  poolRef: pool\n  healthCheck: {interval: 1s, timeout: 2s}\n  typo: 1\n", []string{
			"metadata.namespace: Forbidden: not allowed on this type",
			"spec: Invalid value: exactly one of address or poolRef must be set",
			"spec.healthCheck: Invalid value: timeout must be shorter than interval",
			"spec.ports[1].port: Invalid value: 0: spec.ports[1].port in body should be greater than or equal to 1",
			`spec.ports[2]: Duplicate value: {"port":0}`,
			"spec.ports[2].port: Invalid value: 0: spec.ports[2].port in body should be greater than or equal to 1",
			`spec.typo: unknown field "spec.typo"`,
		}},
	}
	v := testValidator(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := v.Validate(parse(t, tc.in).Object)
			if diff := cmp.Diff(tc.want, problems(diags)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateResult(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]any
	}{{
		name: "cluster-scoped, defaults, unknown and null fields dropped",
		in:   vipHead + "  labels: {tier: edge}\n  bogus: 1\n" + vipSpec + "  healthCheck: {}\n  nodeSelector: null\n  extra: 1\nstatus: {address: x}\n",
		want: map[string]any{
			"apiVersion": "example.novaedge.io/v1alpha1", "kind": "TestVIP",
			"metadata": map[string]any{"name": "vip", "labels": map[string]any{"tier": "edge"}},
			"spec": map[string]any{
				"address":     "192.0.2.1/32",
				"mode":        "BGP",
				"ports":       []any{map[string]any{"port": int64(80), "protocol": "TCP"}},
				"healthCheck": map[string]any{"interval": "10s"},
			},
		},
	}, {
		name: "namespaced without namespace",
		in:   rtHead + "spec:\n  rules: [{backendRefs: [{name: a}, {name: b, weight: 3}]}]\n",
		want: map[string]any{
			"apiVersion": "example.novaedge.io/v1alpha1", "kind": "TestRoute",
			"metadata": map[string]any{"name": "rt", "namespace": "default"},
			"spec": map[string]any{"rules": []any{map[string]any{"backendRefs": []any{
				map[string]any{"name": "a", "weight": int64(1)},
				map[string]any{"name": "b", "weight": int64(3)},
			}}}},
		},
	}, {
		name: "namespace kept",
		in:   rtHead + "  namespace: shop\n",
		want: map[string]any{
			"apiVersion": "example.novaedge.io/v1alpha1", "kind": "TestRoute",
			"metadata": map[string]any{"name": "rt", "namespace": "shop"},
		},
	}}
	v := testValidator(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := parse(t, tc.in)
			before, _ := copyJSON(doc.Object)
			got, _ := v.Validate(doc.Object)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, doc.Object); diff != "" {
				t.Errorf("Validate changed its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestValidateNotJSON(t *testing.T) {
	v := testValidator(t)
	obj := map[string]any{"apiVersion": "example.novaedge.io/v1alpha1", "kind": "TestVIP", "spec": map[string]any{"f": func() {}}}
	got, diags := v.Validate(obj)
	if got != nil || len(diags) != 1 || !strings.Contains(diags[0].Message, "cannot be represented in JSON") {
		t.Errorf("Validate(func value) = %v, %v; want nil and a JSON error", got, diags)
	}
}

func TestValidateDocument(t *testing.T) {
	const in = `apiVersion: example.novaedge.io/v1alpha1
kind: TestVIP
metadata:
  labels: {tier: edge}
spec:
  mode: BGP
  ports:
    - port: 80
    - port: 99999
  nodeSelector:
    node-role.kubernetes.io/edge: 1
  typo: true
---
apiVersion: example.novaedge.io/v1alpha1
kind: TestRoute
metadata: {name: rt}
spec:
  hostnames:
    - ok.example
    - NOT.example
`
	docs, diags := manifest.Parse("in.yaml", []byte(in))
	v := testValidator(t)
	for _, doc := range docs {
		_, ds := v.ValidateDocument(doc)
		diags = append(diags, ds...)
	}
	diags.Sort()
	var got []string
	for _, d := range diags {
		got = append(got, d.String())
	}
	want := []string{
		"in.yaml:1: warning: TestVIP : some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
		// From manifest; the validator does not repeat it.
		"in.yaml:3: error: TestVIP : metadata.name: Required value",
		"in.yaml:9: error: TestVIP : spec.ports[1].port: Invalid value: 99999: spec.ports[1].port in body should be less than or equal to 65535",
		`in.yaml:11: error: TestVIP : spec.nodeSelector.node-role.kubernetes.io/edge: Invalid value: "integer": spec.nodeSelector.node-role.kubernetes.io/edge in body must be of type string: "integer"`,
		`in.yaml:12: error: TestVIP : spec.typo: unknown field "spec.typo"`,
		`in.yaml:20: error: TestRoute default/rt: spec.hostnames[1]: Invalid value: "NOT.example": hostname NOT.example must be lower case`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}

	// A document manifest could not identify is left alone.
	docs, _ = manifest.Parse("in.yaml", []byte("spec: {}\n"))
	if obj, ds := v.ValidateDocument(docs[0]); obj != nil || ds != nil {
		t.Errorf("ValidateDocument(no kind) = %v, %v; want nothing", obj, ds)
	}
}

func TestScopeAndKinds(t *testing.T) {
	v := testValidator(t)
	tests := []struct {
		apiVersion, kind string
		namespaced, ok   bool
	}{
		{"example.novaedge.io/v1alpha1", "TestVIP", false, true},
		{"example.novaedge.io/v1alpha1", "TestRoute", true, true},
		{"example.novaedge.io/v1", "TestRoute", false, false},
		{"example.novaedge.io/v1alpha1", "Other", false, false},
	}
	for _, tc := range tests {
		if ns, ok := v.Scope(tc.apiVersion, tc.kind); ns != tc.namespaced || ok != tc.ok {
			t.Errorf("Scope(%s, %s) = %v, %v; want %v, %v", tc.apiVersion, tc.kind, ns, ok, tc.namespaced, tc.ok)
		}
	}
	want := []KindInfo{
		{APIVersion: "example.novaedge.io/v1alpha1", Kind: "TestRoute", Plural: "testroutes", Namespaced: true},
		{APIVersion: "example.novaedge.io/v1alpha1", Kind: "TestVIP", Plural: "testvips"},
	}
	if diff := cmp.Diff(want, v.Kinds()); diff != "" {
		t.Errorf("Kinds (-want +got):\n%s", diff)
	}
}

func TestNewErrors(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "widgets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// crd returns a one-version CRD of kind Thing with the given schema.
	crd := func(schema string) []byte {
		return []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.novaedge.io}
spec:
  group: example.novaedge.io
  names: {kind: Thing, listKind: ThingList, plural: things, singular: thing}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
` + schema)
	}
	tests := []struct {
		name string
		crds [][]byte
		want string // substring of the error
	}{
		{"twice", [][]byte{good, good}, "kind example.novaedge.io/v1alpha1 TestVIP is defined twice"},
		{"not a crd", [][]byte{[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")}, `v1 ConfigMap "x" is not an apiextensions.k8s.io/v1 CustomResourceDefinition`},
		{"yaml error", [][]byte{[]byte("apiVersion: [\n")}, "crds[0]:1: error: YAML syntax error"},
		{"unknown crd field", [][]byte{crd("          type: object\n          colour: red\n")}, `unknown field "spec.versions[0].schema.openAPIV3Schema.colour"`},
		{"bad cel rule", [][]byte{crd("          type: object\n          x-kubernetes-validations: [{rule: 'self.nope +'}]\n")}, "compilation failed"},
		{"not structural", [][]byte{crd("          type: object\n          properties:\n            spec: {}\n")}, "must not be empty for specified object fields"},
		{"no schema", [][]byte{[]byte(strings.Replace(string(crd("")), "      schema:\n        openAPIV3Schema:\n", "", 1))}, "spec.versions[0].schema.openAPIV3Schema: Required value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(crdcheck.Check, tc.crds...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidateConcurrently(t *testing.T) {
	v := testValidator(t)
	obj := parse(t, vipHead+vipSpec+"  poolRef: pool\n").Object
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, diags := v.Validate(obj); len(diags) != 1 {
					t.Errorf("Validate = %v, want the one CEL error", diags)
					return
				}
			}
		})
	}
	wg.Wait()
}
