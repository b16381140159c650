// Package bpffs holds the few system calls fastpath/attach needs to check for
// and mount the BPF filesystem, kept here so the parent package stays free of
// golang.org/x/sys/unix.
package bpffs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// IsBPFFS reports whether path lies on a BPF filesystem.
func IsBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return uint32(st.Type) == uint32(unix.BPF_FS_MAGIC), nil
}

// Mount mounts a BPF filesystem at path, creating the directory first. Mode
// 0700 keeps the pins to root, like the kernel's default for bpffs.
func Mount(path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("create mount point %s: %w", path, err)
	}
	if err := unix.Mount("bpf", path, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", path, err)
	}
	return nil
}
