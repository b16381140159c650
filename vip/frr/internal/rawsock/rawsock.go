// Package rawsock opens the raw IPv4 socket package frr reads its
// neighbours' OSPF packets from, optionally inside another network
// namespace. It keeps the system-call imports in an internal package (see
// the depguard rule in .golangci.yml).
package rawsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/mdlayher/socket"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// protoOSPF is OSPF's IP protocol number.
const protoOSPF = 89

// allSPFRouters is the group OSPF Hellos are sent to (RFC 2328 A.1).
var allSPFRouters = [4]byte{224, 0, 0, 5}

// Conn receives the OSPF packets arriving on one interface.
type Conn struct {
	c *socket.Conn
}

// ListenOSPF opens a raw socket for IP protocol 89 bound to the interface
// ifname and joined to AllSPFRouters on it, so that it sees the Hellos
// even before ospfd runs on the interface. nsPath names the network
// namespace the interface is in (e.g. /run/netns/x); empty means the
// process's. The socket stays in that namespace after it is opened.
func ListenOSPF(nsPath, ifname string) (*Conn, error) {
	if nsPath == "" {
		return listen(ifname)
	}
	type result struct {
		c   *Conn
		err error
	}
	ch := make(chan result, 1)
	// A thread of its own: it enters the namespace, and if it cannot
	// come back it must die with its goroutine (still locked) rather than
	// serve other goroutines from the wrong namespace.
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("read current network namespace: %w", err)}
			return
		}
		defer func() { _ = orig.Close() }()
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open network namespace %s: %w", nsPath, err)}
			return
		}
		defer func() { _ = target.Close() }()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter network namespace %s: %w", nsPath, err)}
			return
		}
		c, err := listen(ifname)
		if rerr := netns.Set(orig); rerr != nil {
			if c != nil {
				_ = c.Close()
			}
			ch <- result{err: fmt.Errorf("leave network namespace %s: %w", nsPath, rerr)}
			return // the thread stays locked and ends with the goroutine
		}
		runtime.UnlockOSThread()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func listen(ifname string) (*Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	c, err := socket.Socket(unix.AF_INET, unix.SOCK_RAW, protoOSPF, "ospf", nil)
	if err != nil {
		return nil, fmt.Errorf("open raw ospf socket: %w", err)
	}
	if err := c.SetsockoptString(unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bind raw ospf socket to %s: %w", ifname, err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: allSPFRouters, Ifindex: int32(ifi.Index)})
	}); err != nil || serr != nil {
		_ = c.Close()
		return nil, fmt.Errorf("join 224.0.0.5 on %s: %w", ifname, errors.Join(err, serr))
	}
	return &Conn{c: c}, nil
}

// Read returns the next OSPF packet (without its IP header) and its IP
// source address. It blocks until one arrives, ctx ends or the Conn is
// closed.
func (c *Conn) Read(ctx context.Context, buf []byte) ([]byte, netip.Addr, error) {
	for {
		n, _, err := c.c.Recvfrom(ctx, buf, 0)
		if err != nil {
			return nil, netip.Addr{}, err
		}
		b := buf[:n]
		if len(b) < 20 || b[0]>>4 != 4 {
			continue
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || ihl > len(b) {
			continue
		}
		return b[ihl:], netip.AddrFrom4([4]byte(b[12:16])), nil
	}
}

// Close closes the socket; a blocked Read returns.
func (c *Conn) Close() error { return c.c.Close() }
