package loader

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/diag"
)

// dropChunks forgets what earlier loads read, so the next Load parses and
// checks every document.
func dropChunks() {
	held.mu.Lock()
	held.chunks, held.rest = nil, nil
	held.mu.Unlock()
}

// restChunks puts the held chunks to rest, as releaseValidator does, and
// returns what they left.
func restChunks() restCache {
	held.mu.Lock()
	defer held.mu.Unlock()
	held.rest, held.chunks = restOf(held.chunks), nil
	return held.rest
}

// heldChunks returns the chunk results the last Load kept.
func heldChunks() chunkCache {
	held.mu.Lock()
	defer held.mu.Unlock()
	return held.chunks
}

// TestLoadReusesChunks edits a configuration step by step (moving,
// changing, reordering, splitting and removing documents, with errors,
// warnings, duplicates and a syntax error among them) and checks that a
// Load reusing the previous load's chunks returns exactly what a Load
// that parses everything returns: diagnostics (positions included), the
// Input, and the positions Locate gives. It does so with the chunks held
// ("warm") and with the chunks put to rest before each step ("at rest",
// the first load after a quiet spell).
func TestLoadReusesChunks(t *testing.T) {
	for _, mode := range []string{"warm", "at rest"} {
		t.Run(mode, func(t *testing.T) { testLoadReusesChunks(t, mode == "at rest") })
	}
}

func testLoadReusesChunks(t *testing.T, atRest bool) {
	var docs []string
	for _, f := range []string{"kinds.yaml", "crd-errors.yaml", "core-errors.yaml", "unknown-kinds.yaml", "locate.yaml", "dup/a.yaml", "dup/b.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		for d := range strings.SplitSeq(string(data), "\n---\n") {
			docs = append(docs, strings.TrimSuffix(d, "\n")+"\n")
		}
	}
	docs = append(docs, "apiVersion: v1\nkind: [broken\n",
		// The message quotes a line: the chunk must not be reused elsewhere.
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: twice}\nmetadata: {name: again}\n")
	join := func(ds []string) string { return strings.Join(ds, "---\n") }
	reversed := slices.Clone(docs)
	slices.Reverse(reversed)
	changed := slices.Clone(docs)
	changed[3] = strings.Replace(changed[3], "name:", "name: changed-", 1)
	half := len(docs) / 2

	steps := []struct {
		name    string
		files   map[string]string
		changed int // chunks whose bytes are new; -1: not checked
	}{
		{"first", map[string]string{"a.yaml": join(docs)}, -1},
		{"same again", map[string]string{"a.yaml": join(docs)}, 0},
		// The comment joins the first chunk: only that one is new.
		{"moved down", map[string]string{"a.yaml": "# a comment\n\n\n" + join(docs)}, 1},
		{"one changed", map[string]string{"a.yaml": "# a comment\n\n\n" + join(changed)}, 1},
		// Without the comment, and with docs[3] as it was: two new.
		{"reordered", map[string]string{"a.yaml": join(reversed)}, 2},
		{"split in two files", map[string]string{"a.yaml": join(docs[:half]), "b.yaml": join(docs[half:])}, -1},
		{"some removed", map[string]string{"a.yaml": join(docs[2:half]), "b.yaml": join(docs[half+3:])}, 0},
		// The same bytes twice in a file: each its own documents.
		{"one twice", map[string]string{"a.yaml": join(append(slices.Clone(docs[2:half]), docs[2]))}, 0},
	}
	dir := t.TempDir()
	dropChunks()
	for _, step := range steps {
		old, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		for name, content := range step.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := heldChunks()
		var rest restCache
		if atRest {
			rest = restChunks()
		}
		warm, warmDiags := Load(dir)
		if atRest {
			// Every clean chunk at rest that comes back is decoded from
			// what it left, not parsed again.
			revived := 0
			for key, cr := range heldChunks() {
				rc, ok := rest[key]
				if !ok {
					continue
				}
				if len(cr.docs) != len(rc) {
					t.Errorf("%s: a chunk at rest came back with %d documents, want %d", step.name, len(cr.docs), len(rc))
					continue
				}
				for i := range cr.docs {
					if &cr.docs[i].raw[0] != &rc[i].decoded[0] {
						t.Errorf("%s: a chunk at rest was parsed again at line %d", step.name, cr.line)
					}
				}
				revived++
			}
			if step.name != "first" && len(rest) > 0 && revived == 0 {
				t.Errorf("%s: no chunk at rest was revived", step.name)
			}
		}
		// Every chunk seen before is reused, unless it had diagnostics
		// and moved (then it is parsed again); only new bytes are new.
		if step.changed >= 0 && !atRest {
			fresh := 0
			for key, cr := range heldChunks() {
				prev := before[key]
				switch {
				case prev == nil:
					fresh++
				case cr != prev && (prev.clean || prev.line == cr.line):
					t.Errorf("%s: a chunk first seen at line %d was parsed again at line %d", step.name, prev.line, cr.line)
				case cr == prev && !cr.clean && cr.line != prev.line:
					t.Errorf("%s: a chunk with diagnostics was reused at another line", step.name)
				}
			}
			if fresh > step.changed {
				t.Errorf("%s: %d chunks new, want at most %d", step.name, fresh, step.changed)
			}
		}
		if step.name != "first" && len(heldChunks()) == 0 {
			t.Fatalf("%s: the load kept no chunks for the next", step.name)
		}
		dropChunks()
		cold, coldDiags := Load(dir)

		if diff := cmp.Diff(coldDiags, warmDiags); diff != "" {
			t.Errorf("%s: diagnostics (-parsed +reused):\n%s", step.name, diff)
		}
		if len(coldDiags) == 0 {
			t.Errorf("%s: no diagnostics: the test documents lost their problems", step.name)
		}
		if coldIn, warmIn := inputJSON(t, cold.Input), inputJSON(t, warm.Input); coldIn != warmIn {
			t.Errorf("%s: Input differs:\nparsed %s\nreused %s", step.name, coldIn, warmIn)
		}
		if len(cold.docs) != len(warm.docs) {
			t.Errorf("%s: %d documents kept, want %d", step.name, len(warm.docs), len(cold.docs))
		}
		for ref := range cold.docs {
			for _, f := range []string{"", "kind", "metadata.name", "spec"} {
				if got, want := warm.Position(ref, f), cold.Position(ref, f); got != want {
					t.Errorf("%s: Position(%s, %q) = %v, want %v", step.name, ref, f, got, want)
				}
			}
		}
		// Load again with this load's chunks kept, for the next step.
		if _, d := Load(dir); len(d) != len(coldDiags) {
			t.Fatalf("%s: a second load reported %d problems, want %d", step.name, len(d), len(coldDiags))
		}
	}
}

// TestLoadSharesReusedObjects: a load that reuses a chunk hands out the
// objects decoded from it before, not copies (copying 3000 routes cost 9 ms
// of every reload); Result.Input is read-only for that reason.
func TestLoadSharesReusedObjects(t *testing.T) {
	dropChunks()
	first, _ := Load("testdata/kinds.yaml")
	if len(first.Input.Routes) == 0 || len(first.Input.Routes[0].Spec.Rules) == 0 {
		t.Fatal("testdata/kinds.yaml has no route with rules")
	}
	before := heldChunks()
	second, diags := Load("testdata/kinds.yaml")
	for key, cr := range heldChunks() {
		if before[key] != cr {
			t.Fatal("the second load parsed a chunk again: nothing reused, nothing tested")
		}
	}
	if &second.Input.Routes[0].Spec.Rules[0] != &first.Input.Routes[0].Spec.Rules[0] {
		t.Error("the second load copied the route's rules instead of sharing them")
	}
	if diags.HasErrors() {
		t.Errorf("unexpected errors: %v", diags)
	}
}

// TestLoadHoldsOnlyItsChunks: the chunks a Load keeps for the next hold
// their own bytes, not their file's, so a series of edits, each adding a
// route to a file of 3000, does not leave every version of the file on
// the heap while the loader holds its chunks. (Each kept chunk's documents
// used to hold the file they were read from: 0.9 MB more per edit.)
func TestLoadHoldsOnlyItsChunks(t *testing.T) {
	dropChunks()
	path := filepath.Join(t.TempDir(), "routes.yaml")
	const edits = 20
	var heap [edits]uint64
	var res *Result
	for i := range edits {
		if err := os.WriteFile(path, []byte(routesYAML(3000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		var diags diag.List
		res, diags = Load(path)
		if len(diags) > 0 || len(res.Input.Routes) != 3000+i {
			t.Fatalf("edit %d: %d routes, diagnostics %v", i, len(res.Input.Routes), diags)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap[i] = ms.HeapAlloc
	}
	runtime.KeepAlive(res)
	file, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Growth of less than a quarter of the versions the edits wrote: a
	// margin for the 19 routes added and for other allocations.
	grown := int64(heap[edits-1]) - int64(heap[0])
	if limit := int64(edits-1) * file.Size() / 4; grown > limit {
		t.Fatalf("the heap grew by %d kB over %d edits of a %d kB file (limit %d kB): the loader holds old versions of the file",
			grown>>10, edits-1, file.Size()>>10, limit>>10)
	}
	t.Logf("heap grew by %d kB over %d edits of a %d kB file", grown>>10, edits-1, file.Size()>>10)
}
