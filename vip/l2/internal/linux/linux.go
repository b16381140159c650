// Package linux holds the few raw Linux constants that package l2 needs, so
// that the system-call imports stay in one small internal package (see the
// depguard rule in .golangci.yml).
package linux

import (
	"errors"

	"golang.org/x/sys/unix"
)

// FlagNoDAD asks the kernel to skip duplicate address detection for an IPv6
// address, so that it is usable as soon as it is added.
const FlagNoDAD = unix.IFA_F_NODAD

// FlagNoPrefixRoute asks the kernel not to add the route of an IPv6
// address's prefix to the main table (a /128 on lo would otherwise get a
// main-table route through lo).
const FlagNoPrefixRoute = unix.IFA_F_NOPREFIXROUTE

// InfiniteLifetime is the address lifetime (in seconds) the kernel reads as
// "forever".
const InfiniteLifetime = 0xffffffff

// IsExist reports whether err is the kernel's EEXIST, as returned when adding
// an address that is already there.
func IsExist(err error) bool { return errors.Is(err, unix.EEXIST) }

// IsAddrNotAvail reports whether err is the kernel's EADDRNOTAVAIL, as
// returned when deleting an address that is not there (any more).
func IsAddrNotAvail(err error) bool { return errors.Is(err, unix.EADDRNOTAVAIL) }
