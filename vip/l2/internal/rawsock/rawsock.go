// Package rawsock is a minimal AF_PACKET socket for package l2: whole
// Ethernet frames of one EtherType on one interface, with an optional
// classic BPF filter attached before bind. It exists because the
// mdlayher/packet version pinned in go.mod does not build against the
// mdlayher/socket version the module selects; it keeps the system-call
// imports in an internal package (see the depguard rule in .golangci.yml).
package rawsock

import (
	"context"
	"fmt"
	"net"

	"github.com/mdlayher/socket"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Kind is the kernel's classification of a received frame (sll_pkttype).
type Kind uint8

// Frame kinds.
const (
	Host      Kind = unix.PACKET_HOST      // unicast to this interface's MAC
	Broadcast Kind = unix.PACKET_BROADCAST // to ff:ff:ff:ff:ff:ff
	Multicast Kind = unix.PACKET_MULTICAST // to a multicast MAC
	OtherHost Kind = unix.PACKET_OTHERHOST // to another MAC, seen in promiscuous mode
	Outgoing  Kind = unix.PACKET_OUTGOING  // sent by this host
)

// Conn is a packet socket bound to one interface and EtherType.
type Conn struct {
	c       *socket.Conn
	ifindex int
	proto   uint16 // network byte order
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Listen opens a packet socket for frames of etherType on the interface
// with index ifindex, in the network namespace of the calling thread. A
// non-empty filter is attached before the socket is bound, so that no
// frame slips past it.
func Listen(ifindex int, etherType uint16, filter []bpf.RawInstruction) (*Conn, error) {
	proto := htons(etherType)
	c, err := socket.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(proto), "packet", nil)
	if err != nil {
		return nil, fmt.Errorf("open packet socket: %w", err)
	}
	if len(filter) > 0 {
		if err := c.SetBPF(filter); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("attach filter to packet socket: %w", err)
		}
	}
	if err := c.Bind(&unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bind packet socket to interface %d: %w", ifindex, err)
	}
	return &Conn{c: c, ifindex: ifindex, proto: proto}, nil
}

// Read reads one frame into buf and returns its length and kind. It blocks
// until a frame arrives or the Conn is closed.
func (c *Conn) Read(buf []byte) (int, Kind, error) {
	n, sa, err := c.c.Recvfrom(context.Background(), buf, 0)
	if err != nil {
		return 0, 0, err
	}
	var kind Kind
	if ll, ok := sa.(*unix.SockaddrLinklayer); ok {
		kind = Kind(ll.Pkttype)
	}
	return n, kind, nil
}

// Write sends frame, a whole Ethernet frame, addressed to dst.
func (c *Conn) Write(frame []byte, dst net.HardwareAddr) error {
	sa := &unix.SockaddrLinklayer{Protocol: c.proto, Ifindex: c.ifindex, Halen: uint8(len(dst))}
	copy(sa.Addr[:], dst)
	return c.c.Sendto(context.Background(), frame, 0, sa)
}

// Close closes the socket; a blocked Read returns with an error.
func (c *Conn) Close() error { return c.c.Close() }
