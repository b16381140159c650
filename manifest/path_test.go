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

// TestDetachedLine: a detached document has no object and no tree left, and
// finds the same lines as before by parsing its part of the file again, also
// when its part holds several documents and follows others.
func TestDetachedLine(t *testing.T) {
	route, err := os.ReadFile(filepath.Join("testdata", "route.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// "--- {" is no separator line for split: the second and third
	// documents come from one chunk, the third at index 1.
	multi := "apiVersion: v1\nkind: First\nmetadata: {name: a}\n---\n" +
		"apiVersion: v1\nkind: Mid\nmetadata: {name: b}\n" +
		"--- {apiVersion: v1, kind: Second, metadata: {name: c},\n  spec: {x: 1}}\n" +
		"---\n" + string(route) // route.yaml's line n is line n+10
	paths := []string{"", "kind", "metadata.name", "metadata.labels[app.kubernetes.io/name]", "spec.x",
		"spec.rules[0].backendRefs[1].name", "spec.rules[1].backendRefs[0].name", "spec.override.timeout", "spec.missing.deeper"}
	type line struct {
		doc  int
		path string
		want int
	}
	tests := []struct {
		name  string
		data  string
		count int
		lines []line // absolute expectations, besides equality with the attached document
	}{
		{"one document", string(route), 1, []line{{0, "spec.rules[0].backendRefs[1].name", 21}}},
		{"documents sharing a part of the file", multi, 4, []line{{2, "spec.x", 9}, {2, "kind", 8}, {3, "spec.override.timeout", 36}, {3, "spec.rules[0].backendRefs[1].name", 31}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, diags := Parse("in.yaml", []byte(tc.data))
			if len(docs) != tc.count || len(diags) != 0 {
				t.Fatalf("Parse: %d docs, diagnostics %q; want %d docs", len(docs), diagStrings(diags), tc.count)
			}
			detached := make([]Document, len(docs))
			for i, doc := range docs {
				d := doc.Detach()
				detached[i] = d
				if d.Object != nil || d.root != nil {
					t.Fatalf("document %d: Detach kept the object or the tree", i)
				}
				if d.Pos != doc.Pos || d.Ref() != doc.Ref() || d.APIVersion != doc.APIVersion {
					t.Errorf("document %d: Detach changed its position or names", i)
				}
				for _, p := range paths {
					if got, want := d.Line(p), doc.Line(p); got != want {
						t.Errorf("document %d (%s): detached Line(%q) = %d, want %d", i, doc.Kind, p, got, want)
					}
				}
			}
			for _, l := range tc.lines {
				if got := detached[l.doc].Line(l.path); got != l.want {
					t.Errorf("document %d: detached Line(%q) = %d, want %d", l.doc, l.path, got, l.want)
				}
			}
		})
	}
}

// TestBareMoved: a bare document keeps none of its file's bytes, and
// Chunk.Moved with its chunk from a later read of the file (its bytes
// moved down four lines by a document before them) finds every line
// again, shifted.
func TestBareMoved(t *testing.T) {
	route, err := os.ReadFile(filepath.Join("testdata", "route.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data := "apiVersion: v1\nkind: First\nmetadata: {name: a}\n---\n" + string(route)
	var bare []Document
	var lines [][]int
	paths := []string{"", "kind", "metadata.name", "spec.rules[0].backendRefs[1].name"}
	for _, c := range split([]byte(data)) {
		if diags := parseChunk("in.yaml", c, func(d Document) {
			var ls []int
			for _, p := range paths {
				ls = append(ls, d.Line(p))
			}
			b := d.Bare()
			if b.src == nil || b.src.chunk.data != nil || b.Object != nil || b.root != nil {
				t.Fatalf("%s: Bare kept the file's bytes, the object or the tree", d.Kind)
			}
			bare, lines = append(bare, b), append(lines, ls)
		}); len(diags) > 0 {
			t.Fatalf("parse: %q", diagStrings(diags))
		}
	}
	later := split([]byte("apiVersion: v1\nkind: Zero\nmetadata: {name: z}\n---\n" + data))
	if len(later) != len(bare)+1 {
		t.Fatalf("%d chunks, want %d", len(later), len(bare)+1)
	}
	for i, d := range bare {
		moved := Chunk{file: "in.yaml", chunk: later[i+1]}.Moved(d)
		if moved.Pos.Line != d.Pos.Line+4 {
			t.Errorf("%s: position line %d after the move, want %d", d.Kind, moved.Pos.Line, d.Pos.Line+4)
		}
		for j, p := range paths {
			if got, want := moved.Line(p), lines[i][j]+4; got != want {
				t.Errorf("%s: Line(%q) = %d after the move, want %d", d.Kind, p, got, want)
			}
		}
	}
}
