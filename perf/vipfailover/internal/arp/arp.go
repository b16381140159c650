package arp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Frame is one ARP packet read from the link.
type Frame struct {
	// At is when the read returned it (the monotonic clock).
	At time.Time
	// Op is 1 for a request, 2 for a reply.
	Op uint16
	// SenderMAC and SenderIP claim that the IP is at the MAC: an answer
	// for the VIP or a gratuitous ARP carries the VIP here.
	SenderMAC net.HardwareAddr
	SenderIP  netip.Addr
	TargetIP  netip.Addr
}

// Socket sends and receives ARP on one link of a namespace.
type Socket struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
	src     netip.Addr
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open opens the socket on ifname in the named namespace; requests it
// sends come from src and the link's MAC.
func Open(nsName, ifname string, src netip.Addr) (*Socket, error) {
	s := &Socket{fd: -1, src: src}
	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked: the runtime ends it with the
		// goroutine instead of reusing a thread in another namespace. The
		// socket stays in the namespace it was opened in.
		runtime.LockOSThread()
		h, err := netns.GetFromName(nsName)
		if err != nil {
			done <- fmt.Errorf("namespace %s: %w", nsName, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", nsName, err)
			return
		}
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			done <- err
			return
		}
		s.ifindex, s.mac = ifi.Index, ifi.HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			done <- fmt.Errorf("packet socket: %w", err)
			return
		}
		s.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
			done <- fmt.Errorf("bind packet socket to %s: %w", ifname, err)
			return
		}
		// A read timeout lets the reader notice Close.
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		done <- unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}()
	if err := <-done; err != nil {
		if s.fd >= 0 {
			_ = unix.Close(s.fd)
		}
		return nil, err
	}
	return s, nil
}

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// Request broadcasts one ARP request for target.
func (s *Socket) Request(target netip.Addr) error {
	pkt := make([]byte, 28)
	binary.BigEndian.PutUint16(pkt[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(pkt[2:], 0x0800) // IPv4
	pkt[4], pkt[5] = 6, 4
	binary.BigEndian.PutUint16(pkt[6:], 1) // request
	copy(pkt[8:14], s.mac)
	src, dst := s.src.As4(), target.As4()
	copy(pkt[14:18], src[:])
	copy(pkt[24:28], dst[:])
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: s.ifindex, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	return unix.Sendto(s.fd, pkt, 0, to)
}

// Read returns the next ARP frame, or ok false when none came within the
// socket's 50 ms read timeout.
func (s *Socket) Read(buf []byte) (f Frame, ok bool, err error) {
	n, _, err := unix.Recvfrom(s.fd, buf, 0)
	at := time.Now()
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return Frame{}, false, nil
	}
	if err != nil {
		return Frame{}, false, fmt.Errorf("read arp: %w", err)
	}
	b := buf[:n]
	if n < 28 || binary.BigEndian.Uint16(b[0:]) != 1 || binary.BigEndian.Uint16(b[2:]) != 0x0800 || b[4] != 6 || b[5] != 4 {
		return Frame{}, false, nil
	}
	return Frame{
		At:        at,
		Op:        binary.BigEndian.Uint16(b[6:]),
		SenderMAC: net.HardwareAddr(append([]byte(nil), b[8:14]...)),
		SenderIP:  netip.AddrFrom4([4]byte(b[14:18])),
		TargetIP:  netip.AddrFrom4([4]byte(b[24:28])),
	}, true, nil
}
