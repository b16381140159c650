package fswatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// collect returns the events received until want of them match (in
// order, others in between allowed) or 10 s pass.
func collect(t *testing.T, w *Watcher, want []Event) []Event {
	t.Helper()
	var got []Event
	deadline := time.After(10 * time.Second)
	for i := 0; i < len(want); {
		select {
		case ev := <-w.Events:
			got = append(got, ev)
			if ev == want[i] {
				i++
			}
		case err := <-w.Errors:
			t.Fatalf("watcher error: %v", err)
		case <-deadline:
			t.Fatalf("got %v, want %v in this order", got, want)
		}
	}
	return got
}

func TestEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare runs before the watch, act after it.
		prepare, act func(t *testing.T, dir string)
		want         func(dir string) []Event
		// never must not be among the events up to want's last.
		never func(dir string) []Event
	}{
		{
			name: "write and close",
			act: func(t *testing.T, dir string) {
				f, err := os.Create(filepath.Join(dir, "a.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteString("kind: x\n"); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			},
			want: func(dir string) []Event {
				a := filepath.Join(dir, "a.yaml")
				return []Event{{a, Writing}, {a, Writing}, {a, Complete}}
			},
		},
		{
			name: "rewrite in place",
			prepare: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			act: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("new"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: func(dir string) []Event {
				a := filepath.Join(dir, "a.yaml")
				return []Event{{a, Writing}, {a, Complete}}
			},
		},
		{
			name: "atomic save: written under another name, renamed into place",
			prepare: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			act: func(t *testing.T, dir string) {
				tmp := filepath.Join(dir, ".a.yaml.tmp")
				if err := os.WriteFile(tmp, []byte("new"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			want: func(dir string) []Event {
				tmp, a := filepath.Join(dir, ".a.yaml.tmp"), filepath.Join(dir, "a.yaml")
				return []Event{{tmp, Complete}, {tmp, Gone}, {a, Moved}}
			},
			// The target itself is never written in place.
			never: func(dir string) []Event { return []Event{{filepath.Join(dir, "a.yaml"), Writing}} },
		},
		{
			name: "remove",
			prepare: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			act: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
			},
			want: func(dir string) []Event { return []Event{{filepath.Join(dir, "a.yaml"), Gone}} },
		},
		{
			name: "ConfigMap volume update: a new directory, then the ..data link swapped",
			act: func(t *testing.T, dir string) {
				ts := filepath.Join(dir, "..2026_11_29")
				if err := os.Mkdir(ts, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
			},
			want: func(dir string) []Event {
				return []Event{{filepath.Join(dir, "..2026_11_29"), Complete}, {filepath.Join(dir, "..data_tmp"), Writing},
					{filepath.Join(dir, "..data_tmp"), Gone}, {filepath.Join(dir, "..data"), Moved}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			w, err := New()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			if err := w.Add(dir); err != nil {
				t.Fatal(err)
			}
			tc.act(t, dir)
			got := collect(t, w, tc.want(dir))
			if tc.never != nil {
				for _, ev := range tc.never(dir) {
					if slices.Contains(got, ev) {
						t.Errorf("got %v among %v", ev, got)
					}
				}
			}
		})
	}
}

// TestCloseWithUnreadEvents: a watcher whose events nobody reads any more
// still closes (its reader is not stuck sending).
func TestCloseWithUnreadEvents(t *testing.T) {
	dir := t.TempDir()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	// More events than the channel holds.
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full := time.Now().Add(10 * time.Second)
	for len(w.Events) < cap(w.Events) {
		if time.Now().After(full) {
			t.Fatalf("%d events queued, want %d", len(w.Events), cap(w.Events))
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	for range w.Events { //nolint:revive // drain: the channel must end
	}
}

func TestAddMissingDirectory(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Add of a missing directory succeeded")
	}
}
