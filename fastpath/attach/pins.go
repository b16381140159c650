package attach

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/novaedge/novaedge/fastpath/attach/internal/bpffs"
)

const (
	// DefaultRoot is where the agent pins its BPF objects.
	DefaultRoot = "/sys/fs/bpf/novaedge"
	// DefaultLayoutVersion is the pin layout this package writes when the
	// caller names none.
	DefaultLayoutVersion = "v1"
	// bpffsMountPoint is where the BPF filesystem is conventionally mounted
	// and where this package mounts it when a root below it needs one.
	bpffsMountPoint = "/sys/fs/bpf"
	// linksDir is the directory, inside a layout version, holding one pinned
	// link per interface, named after the interface.
	linksDir = "links"
)

// Pin is one pinned XDP link found under a root.
type Pin struct {
	// LayoutVersion is the layout directory the pin lives in.
	LayoutVersion string
	// Ifname is the interface the link was pinned for: the pin's file name.
	Ifname string
	// Path is the pin's full path.
	Path string
}

// pinPath returns <root>/<version>/links/<ifname>.
func pinPath(root, version, ifname string) string {
	return filepath.Join(root, version, linksDir, ifname)
}

// validName rejects names that would escape their directory in a pin path.
// Interface names cannot contain '/' anyway; this guards the layout version,
// which comes from the caller.
func validName(kind, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("invalid %s %q: must be a single path element", kind, name)
	}
	return nil
}

// scanPins returns the pins under root in every layout version, sorted by
// version then interface. A root that does not exist has no pins.
func scanPins(root string) ([]Pin, error) {
	versions, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pin root %s: %w", root, err)
	}
	var pins []Pin
	for _, v := range versions {
		if !v.IsDir() {
			continue
		}
		dir := filepath.Join(root, v.Name(), linksDir)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read link pins in %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			pins = append(pins, Pin{LayoutVersion: v.Name(), Ifname: e.Name(), Path: filepath.Join(dir, e.Name())})
		}
	}
	return pins, nil
}

// pinsFor returns the pins of ifname under root: the one in version first
// (when it exists), then those in other layout versions.
func pinsFor(root, version, ifname string) ([]Pin, error) {
	all, err := scanPins(root)
	if err != nil {
		return nil, err
	}
	var out []Pin
	for _, p := range all {
		if p.Ifname == ifname {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Pin) int {
		switch {
		case a.LayoutVersion == version && b.LayoutVersion != version:
			return -1
		case b.LayoutVersion == version && a.LayoutVersion != version:
			return 1
		default:
			return 0
		}
	})
	return out, nil
}

// ensureBPFFS makes sure root is (or will be, once created) on a BPF
// filesystem. A root under /sys/fs/bpf gets bpffs mounted at /sys/fs/bpf,
// which is where every other BPF tool looks; any other root gets its own.
func ensureBPFFS(root string) error {
	anc, err := existingAncestor(root)
	if err != nil {
		return err
	}
	ok, err := bpffs.IsBPFFS(anc)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	mountAt := root
	if root == bpffsMountPoint || strings.HasPrefix(root, bpffsMountPoint+"/") {
		mountAt = bpffsMountPoint
	}
	if err := bpffs.Mount(mountAt); err != nil {
		return fmt.Errorf("%s is not on a bpf filesystem: %w", root, err)
	}
	return nil
}

// existingAncestor returns path or its nearest existing ancestor, whose
// filesystem is the one a directory created at path would be on.
func existingAncestor(path string) (string, error) {
	p := filepath.Clean(path)
	for {
		_, err := os.Stat(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("stat %s: %w", p, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", fmt.Errorf("no existing ancestor of %s: %w", path, err)
		}
		p = parent
	}
}

// removeEmptyDirs removes the links directories of root's layout versions,
// the version directories and root itself, each only when empty: other parts
// of the fast path pin their maps next to the links.
func removeEmptyDirs(root string) {
	versions, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, v := range versions {
		if !v.IsDir() {
			continue
		}
		_ = os.Remove(filepath.Join(root, v.Name(), linksDir))
		_ = os.Remove(filepath.Join(root, v.Name()))
	}
	_ = os.Remove(root)
}
