// Package sysinfo holds the kernel probes' direct system calls, kept in one
// small internal package as the repository's lint rules require.
package sysinfo

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Filesystem magic numbers (statfs f_type).
const (
	BPFFSMagic   = int64(unix.BPF_FS_MAGIC)
	Cgroup2Magic = int64(unix.CGROUP2_SUPER_MAGIC)
)

// Release returns the kernel release string (uname -r).
func Release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// FSMagic returns the type of the filesystem mounted at path.
func FSMagic(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Type), nil
}

// IsPermission reports whether err is EPERM or EACCES.
func IsPermission(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}
