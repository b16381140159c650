package quicsteer

import (
	"testing"

	"golang.org/x/sys/unix"
)

// dupFD returns a new descriptor for fd, as SCM_RIGHTS would deliver.
func dupFD(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
