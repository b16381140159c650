// Package fdpass encodes and decodes the SCM_RIGHTS control messages that
// carry file descriptors over a Unix socket, kept in one small internal
// package as the repository's lint rules require for system calls.
package fdpass

import (
	"fmt"

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
