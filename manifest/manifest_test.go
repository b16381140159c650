package manifest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/diag"
)

func diagStrings(l diag.List) []string {
	var out []string
	for _, d := range l {
		out = append(out, d.String())
	}
	return out
}

func TestLoad(t *testing.T) {
	dir := filepath.Join("testdata", "load")
	docs, diags := Load(dir, filepath.Join("testdata", "route.yaml"), filepath.Join("testdata", "missing.yaml"))

	type got struct {
		Pos  diag.Position
		Ref  diag.Ref
		APIV string
	}
	var gotDocs []got
	for _, d := range docs {
		gotDocs = append(gotDocs, got{d.Pos, d.Ref(), d.APIVersion})
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	wantDocs := []got{
		{diag.Position{File: file("01-vip.yaml"), Line: 1}, diag.Ref{Kind: "ProxyVIP", Name: "vip-a"}, "novaedge.io/v1alpha1"},
		{diag.Position{File: file("01-vip.yaml"), Line: 11}, diag.Ref{Kind: "ProxyVIP", Name: "vip-b"}, "novaedge.io/v1alpha1"},
		// The syntax error in 02-broken.yaml loses its own document only.
		{diag.Position{File: file("02-broken.yaml"), Line: 9}, diag.Ref{Kind: "ProxyBackend", Namespace: "shop", Name: "after-broken"}, "novaedge.io/v1alpha1"},
		{diag.Position{File: file("03-pool.yml"), Line: 1}, diag.Ref{Kind: "ProxyIPPool", Name: "pool"}, "novaedge.io/v1alpha1"},
		{diag.Position{File: filepath.Join("testdata", "route.yaml"), Line: 2}, diag.Ref{Kind: "ProxyRoute", Namespace: "shop", Name: "web"}, "novaedge.io/v1alpha1"},
	}
	if diff := cmp.Diff(wantDocs, gotDocs); diff != "" {
		t.Errorf("documents (-want +got):\n%s", diff)
	}
	wantDiags := []string{
		file("02-broken.yaml") + ":7: error: YAML syntax error: did not find expected node content",
		"testdata/missing.yaml: error: stat testdata/missing.yaml: no such file or directory",
	}
	if diff := cmp.Diff(wantDiags, diagStrings(diags)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}

func TestLoadEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "readme.md"), []byte("# no yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	docs, diags := Load(dir)
	want := []string{dir + ": warning: no *.yaml or *.yml files in directory"}
	if len(docs) != 0 || !cmp.Equal(want, diagStrings(diags)) {
		t.Errorf("Load(empty dir) = %d docs, %q; want 0 docs, %q", len(docs), diagStrings(diags), want)
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		file string
		want map[string]any
	}{{
		file: "numbers.yaml",
		want: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "numbers"},
			"data": map[string]any{
				"int":     int64(80),
				"whole":   int64(1), // as through JSON: 1.0 is sent as 1
				"frac":    1.5,
				"big":     1e30,
				"huge":    float64(math.MaxUint64),
				"hex":     int64(16),
				"yes":     "yes", // YAML 1.2: a string
				"date":    "2001-12-14",
				"nothing": nil,
			},
		},
	}, {
		file: "anchors.yaml",
		want: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "anchors"},
			"base":   map[string]any{"a": int64(1), "b": []any{"x", "y"}},
			"merged": map[string]any{"a": int64(2), "b": []any{"x", "y"}, "c": int64(3)},
			"list": []any{
				map[string]any{"a": int64(1), "b": []any{"x", "y"}},
				map[string]any{"a": int64(1), "b": []any{"x", "y"}},
			},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			docs, diags := Parse(tc.file, data)
			if len(diags) != 0 || len(docs) != 1 {
				t.Fatalf("Parse: %d docs, diagnostics %q", len(docs), diagStrings(diags))
			}
			if diff := cmp.Diff(tc.want, docs[0].Object); diff != "" {
				t.Errorf("object (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const head = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
	tests := []struct {
		name     string
		in       string
		wantDocs int
		want     []string
	}{
		{"empty", "", 0, nil},
		{"comments and separators", "# a\n---\n# b\n---\n\n", 0, nil},
		{"null document", "---\n~\n", 0, nil},
		{"document start marker with content", "--- {apiVersion: v1, kind: A, metadata: {name: a}}\n", 1, nil},
		{"syntax error", head + "data: [\n", 0,
			[]string{"f.yaml:5: error: YAML syntax error: did not find expected node content"}},
		{"syntax error after separator", "# x\n---\n" + head + "  bad: : :\n", 0,
			[]string{"f.yaml:7: error: YAML syntax error: mapping values are not allowed in this context"}},
		{"tab indentation", head + "data:\n\tx: 1\n", 0,
			[]string{"f.yaml:6: error: YAML syntax error: found character that cannot start any token"}},
		{"error does not hide the next document", head + "data: {\n---\n" + head, 1,
			[]string{"f.yaml:5: error: YAML syntax error: did not find expected node content"}},
		{"duplicate key", head + "data: 1\ndata: 2\n", 0,
			[]string{`f.yaml:6: error: mapping key "data" already defined at line 5`}},
		{"non-string key", head + "data:\n  80: http\n", 0,
			[]string{`f.yaml:6: error: mapping key must be a string, not !!int "80" (quote it)`}},
		{"sequence document", "- a\n- b\n", 0,
			[]string{"f.yaml:1: error: document must be a mapping (an object), not a sequence"}},
		{"scalar document", "hello\n", 0,
			[]string{`f.yaml:1: error: document must be a mapping (an object), not the scalar "hello"`}},
		{"not a number", head + "data: .nan\n", 0,
			[]string{"f.yaml:5: error: .nan cannot be represented in JSON"}},
		{"alias cycle", head + "data: &a [*a]\n", 0,
			[]string{"f.yaml:5: error: alias *a refers to a value that contains it"}},
		{"merge cycle", head + "data: &a {<<: *a}\n", 0,
			[]string{"f.yaml:5: error: merge of *a refers to a value that contains it"}},
		{"missing identity", "spec: {}\n", 1, []string{
			"f.yaml:1: error: apiVersion: Required value",
			"f.yaml:1: error: kind: Required value",
			"f.yaml:1: error: metadata.name: Required value",
		}},
		{"missing name", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n", 1, []string{
			"f.yaml:3: error: ConfigMap : metadata.name: Required value",
		}},
		{"kind not a string", "apiVersion: v1\nkind: 5\nmetadata: {name: x}\n", 1, []string{
			"f.yaml:2: error:  x: kind: Invalid value: 5: must be a string",
		}},
		{"second document positions", head + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: n\n", 2, []string{
			"f.yaml:8: error: ConfigMap n/: metadata.name: Required value",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, diags := Parse("f.yaml", []byte(tc.in))
			if len(docs) != tc.wantDocs {
				t.Errorf("got %d documents, want %d", len(docs), tc.wantDocs)
			}
			if diff := cmp.Diff(tc.want, diagStrings(diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAliasBombs(t *testing.T) {
	// Each level refers to the previous one ten times: 10^12 values.
	bomb := func(level func(prev string) string) string {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\na0: &a0 {k: v}\n")
		for i := 1; i <= 12; i++ {
			prev := "*a" + strconv.Itoa(i-1)
			fmt.Fprintf(&b, "a%d: &a%d %s\n", i, i, level(strings.TrimSuffix(strings.Repeat(prev+", ", 10), ", ")))
		}
		return b.String()
	}
	tests := []struct{ name, in string }{
		{"aliases", bomb(func(prevs string) string { return "[" + prevs + "]" })},
		{"merge keys", bomb(func(prevs string) string { return "{<<: [" + prevs + "]}" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, diags := Parse("bomb.yaml", []byte(tc.in))
			if len(docs) != 0 || len(diags) != 1 || !strings.Contains(diags[0].Message, "more than 1000000 values") {
				t.Errorf("Parse(bomb) = %d docs, %q; want one expansion error", len(docs), diagStrings(diags))
			}
		})
	}
}

// TestWalk: Walk hands over the documents Load returns, in the same order,
// and returns the same diagnostics.
func TestWalk(t *testing.T) {
	paths := []string{filepath.Join("testdata", "load"), filepath.Join("testdata", "route.yaml"), filepath.Join("testdata", "missing.yaml")}
	wantDocs, wantDiags := Load(paths...)
	var got []string
	diags := Walk(paths, func(d Document) {
		got = append(got, fmt.Sprintf("%s %s %s", d.Pos, d.APIVersion, d.Ref()))
	})
	var want []string
	for _, d := range wantDocs {
		want = append(want, fmt.Sprintf("%s %s %s", d.Pos, d.APIVersion, d.Ref()))
	}
	if len(want) != 5 {
		t.Fatalf("Load returned %d documents, want 5", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("documents (-Load +Walk):\n%s", diff)
	}
	if diff := cmp.Diff(diagStrings(wantDiags), diagStrings(diags)); diff != "" {
		t.Errorf("diagnostics (-Load +Walk):\n%s", diff)
	}
}
