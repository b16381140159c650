// Package sockcheck tells, without blocking, whether the peer of an idle
// TCP connection has closed it or sent something: one recv(2) with
// MSG_PEEK|MSG_DONTWAIT. A deadline in the past cannot do this in Go (the
// runtime fails the read before making the system call), hence the raw
// socket.
package sockcheck

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// State is what a check found.
type State int

// States of an idle connection.
const (
	// Unknown: the connection is not a socket (a test's net.Pipe, say)
	// or could not be checked.
	Unknown State = iota
	// Idle: nothing to read; the connection can carry a request.
	Idle
	// Readable: the peer sent bytes nobody asked for.
	Readable
	// Closed: the peer closed or reset the connection.
	Closed
)

// Checker checks one connection. The zero Checker reports Unknown.
type Checker struct {
	rc syscall.RawConn
}

// For returns a Checker for c.
func For(c net.Conn) Checker {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Checker{}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return Checker{}
	}
	return Checker{rc: rc}
}

// Check looks at the connection's receive queue without consuming it.
func (k Checker) Check() State {
	if k.rc == nil {
		return Unknown
	}
	st := Unknown
	err := k.rc.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				st = Idle
			case err != nil, n == 0:
				st = Closed
			default:
				st = Readable
			}
			return true
		}
	})
	if err != nil {
		return Closed // the descriptor is closed
	}
	return st
}
