package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// FuzzParse checks that Parse never panics, that every object survives the
// JSON round trip the apiserver would apply unchanged, that Line never
// panics nor leaves the file, and that a detached document finds the same
// lines. The seed corpus is testdata/*.yaml plus
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join("testdata", "load", "*.yaml"))
	for _, name := range append(seeds, more...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, diags := Parse("fuzz.yaml", data)
		for _, d := range diags {
			if d.Pos.File != "fuzz.yaml" || d.Pos.Line < 0 {
				t.Errorf("bad position in %v", d)
			}
		}
		for _, doc := range docs {
			raw, err := json.Marshal(doc.Object)
			if err != nil {
				t.Fatalf("object is not JSON: %v", err)
			}
			var back map[string]any
			if err := utiljson.Unmarshal(raw, &back); err != nil {
				t.Fatalf("JSON of object does not decode: %v", err)
			}
			if diff := cmp.Diff(doc.Object, back); diff != "" {
				t.Fatalf("object changes through JSON (-parsed +json):\n%s", diff)
			}
			detached := doc.Detach()
			for _, p := range []string{"", "metadata.name", "spec.a[0].b", "spec[0][1]", "a.b.c.d", "[", "]", "a[", ".."} {
				l := doc.Line(p)
				if l < doc.Pos.Line {
					t.Errorf("Line(%q) = %d, before the document at %d", p, l, doc.Pos.Line)
				}
				if dl := detached.Line(p); dl != l {
					t.Errorf("detached Line(%q) = %d, want %d as before Detach", p, dl, l)
				}
			}
		}
	})
}
