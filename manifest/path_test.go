package manifest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLine(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "route.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, diags := Parse("route.yaml", data)
	if len(docs) != 1 || len(diags) != 0 {
		t.Fatalf("Parse: %d docs, diagnostics %q", len(docs), diagStrings(diags))
	}
	doc := docs[0]
	tests := []struct {
		path string
		want int
	}{
		{"", 2},
		{"<nil>", 2},
		{"kind", 3},
		{"metadata", 4},
		{"metadata.name", 5},
		{"metadata.labels[app.kubernetes.io/name]", 8},
		{"metadata.labels.app.kubernetes.io/name", 8}, // unknown-field paths use dots
		{"metadata.labels[weird]key]", 9},
		{"spec.nodeSelector.matchLabels[node-role.kubernetes.io/edge]", 13},
		{"spec.rules", 14},
		{"spec.rules[0]", 15},
		{"spec.rules[0].matches[0].path.type", 16},
		{"spec.rules[0].matches[0].path.type.deeper", 16},
		{"spec.rules[0].backendRefs[0].port", 19},
		{"spec.rules[0].backendRefs[1].name", 21},
		{"spec.rules[0].backendRefs[1].weight", 22},
		{"spec.rules[1].backendRefs[0]", 24},      // the alias itself
		{"spec.rules[1].backendRefs[0].name", 21}, // through the alias
		{"spec.override.retries", 29},
		{"spec.override.timeout", 26}, // merged from *defaults
		// Missing elements fall back to the deepest node that exists.
		{"spec.rules[0].backendRefs[5].name", 17},
		{"spec.rules[7]", 14},
		{"spec.rules[x]", 14},
		{"spec.missing.deeper", 10},
		{"status", 2},
		{"metadata.labels[nope", 7},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			if got := doc.Line(tc.path); got != tc.want {
				t.Errorf("Line(%q) = %d, want %d", tc.path, got, tc.want)
			}
		})
	}
	if got, want := doc.Position("spec.rules"), doc.Pos; got.File != want.File || got.Line != 14 {
		t.Errorf("Position(spec.rules) = %v, want %s:14", got, want.File)
	}
	var zero Document
	if got := zero.Line("spec"); got != 0 {
		t.Errorf("zero Document Line = %d, want 0", got)
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct {
		in   string
		want []segment
	}{
		{"", nil},
		{"a.b", []segment{{"a", true}, {"b", true}}},
		{"a[0].b", []segment{{"a", true}, {"0", false}, {"b", true}}},
		{"m[x.y/z][1]", []segment{{"m", true}, {"x.y/z", false}, {"1", false}}},
		{"m[a]b].c", []segment{{"m", true}, {"a]b", false}, {"c", true}}},
		{"m[open", []segment{{"m", true}, {"open", false}}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, splitPath(tc.in), cmp.AllowUnexported(segment{})); diff != "" {
			t.Errorf("splitPath(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
