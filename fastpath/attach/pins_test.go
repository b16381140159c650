package attach

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/novaedge/novaedge/fastpath/attach/internal/bpffs"
)

func TestScanPins(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"v2/links/eth0", "v1/links/eth1", "v1/links/eth0", "v1/maps/conntrack", "v3/links/bond-slave"} {
		path := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pin := func(v, n string) Pin {
		return Pin{LayoutVersion: v, Ifname: n, Path: filepath.Join(root, v, "links", n)}
	}

	got, err := scanPins(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Pin{pin("v1", "eth0"), pin("v1", "eth1"), pin("v2", "eth0"), pin("v3", "bond-slave")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scanPins (-want +got):\n%s", diff)
	}

	got, err = pinsFor(root, "v2", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Pin{pin("v2", "eth0"), pin("v1", "eth0")}, got); diff != "" {
		t.Errorf("pinsFor puts the current version first (-want +got):\n%s", diff)
	}

	if got, err := scanPins(filepath.Join(root, "missing")); err != nil || got != nil {
		t.Errorf("scanPins of a missing root = %v, %v; want none", got, err)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{name: "defaults", opts: Options{}, ok: true},
		{name: "relative root", opts: Options{Root: "pins"}},
		{name: "version with slash", opts: Options{LayoutVersion: "v1/../x"}},
		{name: "version dot-dot", opts: Options{LayoutVersion: ".."}},
		{name: "bad mode", opts: Options{Mode: Mode(7)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.opts)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v) error = %v, want ok: %v", tc.opts, err, tc.ok)
			}
			if a != nil && a.PinPath("eth0") != "/sys/fs/bpf/novaedge/v1/links/eth0" {
				t.Errorf("default pin path %s", a.PinPath("eth0"))
			}
		})
	}
}

// TestEnsureBPFFS mounts a bpffs for a root outside /sys/fs/bpf, and does
// not stack a second mount when one is already there.
func TestEnsureBPFFS(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "pins")
	if ok, err := bpffs.IsBPFFS(filepath.Dir(root)); err != nil || ok {
		t.Fatalf("temp dir on bpffs (%v, %v)? the test needs another filesystem", ok, err)
	}
	t.Cleanup(func() {
		for range mountsAt(t, root) {
			if err := unix.Unmount(root, 0); err != nil {
				t.Errorf("unmount %s: %v", root, err)
			}
		}
	})
	for range 2 {
		if err := ensureBPFFS(root); err != nil {
			t.Fatalf("ensureBPFFS(%s): %v", root, err)
		}
	}
	if ok, err := bpffs.IsBPFFS(root); err != nil || !ok {
		t.Fatalf("%s is not bpffs after ensureBPFFS (%v)", root, err)
	}
	if n := len(mountsAt(t, root)); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, root)
	}
}

func mountsAt(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			out = append(out, line)
		}
	}
	return out
}
