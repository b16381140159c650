package sockets

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func dup(fd int) (int, error) { return unix.Dup(fd) }

// nonBlocking reports whether the socket of c has O_NONBLOCK set.
func nonBlocking(t *testing.T, c any) bool {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return flags&unix.O_NONBLOCK != 0
}
