// Package linux holds the few raw Linux constants and socket options that
// package local needs, so that the system-call imports stay in one small
// internal package (see the depguard rule in .golangci.yml).
package linux

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Address flags as the kernel reports them in IFA_FLAGS.
const (
	// FlagNoDAD asks the kernel to skip duplicate address detection for an
	// IPv6 address, so that it is usable as soon as it is added.
	FlagNoDAD = unix.IFA_F_NODAD
	// FlagTentative marks an IPv6 address still in duplicate address
	// detection; it cannot be bound to until detection ends.
	FlagTentative = unix.IFA_F_TENTATIVE
)

// RouteLocal is the route type (RTN_LOCAL) of addresses that belong to the
// host: packets to them are delivered locally.
const RouteLocal = unix.RTN_LOCAL

// IsExist reports whether err is the kernel's EEXIST, as returned when adding
// an address that is already there.
func IsExist(err error) bool { return errors.Is(err, unix.EEXIST) }

// IsAddrNotAvail reports whether err is the kernel's EADDRNOTAVAIL, as
// returned when deleting an address that is not there (any more).
func IsAddrNotAvail(err error) bool { return errors.Is(err, unix.EADDRNOTAVAIL) }

// Freebind is a net.ListenConfig Control function that sets IP_FREEBIND on
// IPv4 and IPV6_FREEBIND on IPv6 TCP and UDP sockets, so that they can bind an
// address that is not (yet) configured on the host. Other networks (unix
// sockets, raw IP) are left as they are.
func Freebind(network, _ string, c syscall.RawConn) error {
	var level, opt int
	var name string
	switch network {
	case "tcp4", "udp4":
		level, opt, name = unix.SOL_IP, unix.IP_FREEBIND, "IP_FREEBIND"
	case "tcp6", "udp6":
		level, opt, name = unix.SOL_IPV6, unix.IPV6_FREEBIND, "IPV6_FREEBIND"
	default:
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, opt, 1)
	}); err != nil {
		return fmt.Errorf("set %s on %s socket: %w", name, network, err)
	}
	if serr != nil {
		return fmt.Errorf("set %s on %s socket: %w", name, network, serr)
	}
	return nil
}
