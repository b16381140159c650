// Package sockopt holds the few raw socket options that package bfd needs,
// so that the system-call imports stay in one small internal package (see
// the depguard rule in .golangci.yml).
package sockopt

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxTTL is the TTL (IPv4) or hop limit (IPv6) single-hop BFD sends with and
// requires on receipt (RFC 5881 §5, the generalized TTL security mechanism).
const MaxTTL = 255

// Sender returns a net.ListenConfig Control function for a socket that sends
// BFD control packets: it sets the unicast TTL or hop limit to 255 before
// the first packet can leave and, when device is not empty, binds the
// socket to that interface (SO_BINDTODEVICE), so that packets leave through
// it whatever the routing table says.
func Sender(device string) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		var level, opt int
		var name string
		switch network {
		case "udp4":
			level, opt, name = unix.IPPROTO_IP, unix.IP_TTL, "IP_TTL"
		case "udp6":
			level, opt, name = unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, "IPV6_UNICAST_HOPS"
		default:
			return fmt.Errorf("bfd sender socket: unexpected network %q", network)
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), level, opt, MaxTTL); serr != nil {
				serr = fmt.Errorf("set %s to %d: %w", name, MaxTTL, serr)
				return
			}
			if device != "" {
				if err := unix.BindToDevice(int(fd), device); err != nil {
					serr = fmt.Errorf("bind to device %s: %w", device, err)
				}
			}
		}); err != nil {
			return fmt.Errorf("configure %s socket: %w", network, err)
		}
		return serr
	}
}

// IsAddrInUse reports whether err is the kernel's EADDRINUSE, as returned
// when binding a port another socket holds.
func IsAddrInUse(err error) bool { return errors.Is(err, unix.EADDRINUSE) }

// IsFamilyUnsupported reports whether err says the address family is not
// available, as on hosts booted with IPv6 disabled.
func IsFamilyUnsupported(err error) bool {
	return errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT)
}
