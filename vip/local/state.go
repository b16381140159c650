package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
)

// stateVersion is written into the state file so that a later format can be
// told apart from this one instead of being misread.
const stateVersion = 1

// stateFile is the on-disk form of the addresses a Manager added.
type stateFile struct {
	Version   int            `json:"version"`
	Addresses []stateAddress `json:"addresses"`
}

type stateAddress struct {
	Prefix    string `json:"prefix"`
	Interface string `json:"interface"`
}

// loadState reads the addresses recorded in path. A missing file means none:
// the first start, or the last Release removed it.
func loadState(path string) (map[Address]struct{}, error) {
	owned := make(map[Address]struct{})
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return owned, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state file %s: %w", path, err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("corrupt state file %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("corrupt state file %s: unsupported version %d (want %d)", path, st.Version, stateVersion)
	}
	for i, sa := range st.Addresses {
		p, err := netip.ParsePrefix(sa.Prefix)
		if err != nil {
			return nil, fmt.Errorf("corrupt state file %s: address %d: %w", path, i, err)
		}
		if sa.Interface == "" {
			// Written files always name the interface; an empty one means the
			// file was edited or damaged, and guessing "lo" could make the
			// manager remove an address it never added.
			return nil, fmt.Errorf("corrupt state file %s: address %d (%s): no interface", path, i, p)
		}
		a, err := normalize(Address{Prefix: p, Interface: sa.Interface})
		if err != nil {
			return nil, fmt.Errorf("corrupt state file %s: address %d: %w", path, i, err)
		}
		owned[a] = struct{}{}
	}
	return owned, nil
}

// saveState records owned in path, atomically: a crash leaves either the old
// file or the new one, never a torn one that the next start would reject. No
// owned address means no file.
func saveState(path string, owned map[Address]struct{}) error {
	if len(owned) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove state file %s: %w", path, err)
		}
		return nil
	}
	st := stateFile{Version: stateVersion, Addresses: []stateAddress{}}
	for _, a := range sortedKeys(owned) {
		st.Addresses = append(st.Addresses, stateAddress{Prefix: a.Prefix.String(), Interface: a.Interface})
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state file %s: %w", path, err)
	}
	if err := writeFileAtomic(path, append(data, '\n')); err != nil {
		return fmt.Errorf("write state file %s: %w", path, err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file in the directory of path and
// renames it over path; rename within one directory is atomic on Linux.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	// Sync before rename, or a crash could leave the new name pointing at
	// an empty file.
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// Make the rename itself durable. Best effort: some filesystems refuse
	// to sync a directory, and the file is already complete either way.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
