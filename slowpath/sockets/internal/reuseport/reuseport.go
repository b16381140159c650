// Package reuseport sets the socket options of UDP reuseport groups
// (SO_REUSEPORT, SO_ATTACH_REUSEPORT_EBPF), kept in one small internal
// package as the repository's lint rules require for system calls.
package reuseport

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Enable sets SO_REUSEPORT on a socket before it is bound; it has the
// signature of net.ListenConfig.Control.
func Enable(_, _ string, c syscall.RawConn) error {
	return enable(c)
}

// Wrap returns a net.ListenConfig.Control that runs control (if not nil)
// and then sets SO_REUSEPORT.
func Wrap(control func(network, address string, c syscall.RawConn) error) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if control != nil {
			if err := control(network, address, c); err != nil {
				return err
			}
		}
		return enable(c)
	}
}

func enable(c syscall.RawConn) error {
	return control(c, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("set SO_REUSEPORT: %w", err)
		}
		return nil
	})
}

// AttachProgram attaches the SK_REUSEPORT program progFD to the reuseport
// group of the socket conn (a syscall.Conn such as *net.UDPConn),
// replacing the group's previous program.
func AttachProgram(conn any, progFD int) error {
	return FD(conn, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, progFD); err != nil {
			return fmt.Errorf("set SO_ATTACH_REUSEPORT_EBPF: %w", err)
		}
		return nil
	})
}

// FD runs f with the descriptor of the socket conn (a syscall.Conn such
// as *net.UDPConn), e.g. to put it into a map.
func FD(conn any, f func(fd int) error) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T is not a system socket", conn)
	}
	c, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	return control(c, f)
}

func control(c syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return fmt.Errorf("socket control: %w", err)
	}
	return ferr
}
