// Package fdpass encodes and decodes the SCM_RIGHTS control messages that
// carry file descriptors over a Unix socket, kept in one small internal
// package as the repository's lint rules require for system calls.
package fdpass

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Rights returns the control message that passes fds.
func Rights(fds []int) []byte { return unix.UnixRights(fds...) }

// Space is the control buffer size needed to receive n descriptors.
func Space(n int) int { return unix.CmsgSpace(n * 4) }

// ParseRights returns the descriptors carried by a control message.
func ParseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("parse SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Close closes a descriptor received but not used.
func Close(fd int) { _ = unix.Close(fd) }

// ErrNotSocket is returned by Dup for a connection without a descriptor
// (e.g. an in-memory one in a test).
var ErrNotSocket = errors.New("not a system socket")

// Dup returns a new descriptor (close-on-exec) for the socket conn (a
// syscall.Conn such as *net.UDPConn or *net.TCPListener), to send. Unlike (*os.File).Fd on the result of File, it leaves the socket's
// shared file status alone: Fd switches the socket to blocking mode, and
// a process still reading it through Go's poller (e.g. a QUIC server
// draining its connections, which reads with recvmmsg) would then block
// until a whole batch of datagrams has arrived.
func Dup(conn any) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("dup %T: %w", conn, ErrNotSocket)
	}
	c, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("dup: %w", err)
	}
	var (
		nfd  int
		derr error
	)
	if err := c.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, fmt.Errorf("dup: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("dup: %w", derr)
	}
	return nfd, nil
}
