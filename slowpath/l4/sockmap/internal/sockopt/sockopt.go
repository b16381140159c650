// Package sockopt holds the socket system calls the sockmap splicer makes on
// TCP connections whose file descriptors belong to a *net.TCPConn: reading a
// socket's cookie and queue state, waiting for an end of stream without
// reading (the kernel consumes the bytes), and waking its receive path. The
// descriptor is only ever used inside the connection's RawConn callbacks, so
// ownership stays with the *net.TCPConn.
package sockopt

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpClose is TCP_CLOSE (include/net/tcp_states.h), the state TCP_INFO
// reports for a reset or fully closed connection.
const tcpClose = 7

// Socket gives access to the kernel socket of a *net.TCPConn.
type Socket struct {
	rc syscall.RawConn
}

// New returns the Socket of c.
func New(c *net.TCPConn) (Socket, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Socket{}, fmt.Errorf("raw connection: %w", err)
	}
	return Socket{rc: rc}, nil
}

// Control runs f with the socket's file descriptor, which f must not keep.
func (s Socket) Control(f func(fd uintptr) error) error {
	var ferr error
	if err := s.rc.Control(func(fd uintptr) { ferr = f(fd) }); err != nil {
		return err
	}
	return ferr
}

// Cookie returns the socket cookie (SO_COOKIE): a number the kernel gives
// each socket once and never reuses while the host runs, by which BPF
// programs know the socket.
func (s Socket) Cookie() (uint64, error) {
	var c uint64
	err := s.Control(func(fd uintptr) error {
		var err error
		c, err = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("getsockopt SO_COOKIE: %w", err)
	}
	return c, nil
}

// Unread returns how many received bytes the socket holds that nobody has
// consumed yet (SIOCINQ), neither a reader nor a BPF verdict program.
func (s Socket) Unread() (int, error) {
	var n int
	err := s.Control(func(fd uintptr) error {
		var err error
		n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ioctl SIOCINQ: %w", err)
	}
	return n, nil
}

// Written returns how many data bytes entered the socket's send path since
// the connection started, and whether the connection is closed (reset, or
// fully closed), after which no byte can be sent any more.
//
// The count is the bytes the peer acknowledged (TCP_INFO) plus the bytes in
// the send queue (SIOCOUTQ), read in that order: an acknowledgement arriving
// between the two calls makes the sum smaller than the truth, never larger,
// so a caller waiting for a target never stops early. It is exact while no
// FIN has been queued.
func (s Socket) Written() (n uint64, closed bool, err error) {
	err = s.Control(func(fd uintptr) error {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return fmt.Errorf("getsockopt TCP_INFO: %w", err)
		}
		if info.State == tcpClose {
			n, closed = info.Bytes_acked, true
			return nil
		}
		outq, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		if err != nil {
			return fmt.Errorf("ioctl SIOCOUTQ: %w", err)
		}
		n = info.Bytes_acked + uint64(outq)
		return nil
	})
	return n, closed, err
}

// tcpEstablished is TCP_ESTABLISHED, the only state of a connected TCP socket
// a socket map accepts.
const tcpEstablished = 1

// Established reports whether the connection is in the ESTABLISHED state:
// one that has received a FIN (CLOSE_WAIT) or sent one no longer is.
func (s Socket) Established() (bool, error) {
	var ok bool
	err := s.Control(func(fd uintptr) error {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return fmt.Errorf("getsockopt TCP_INFO: %w", err)
		}
		ok = info.State == tcpEstablished
		return nil
	})
	return ok, err
}

// Nudge makes the kernel run the socket's data-ready callback now if it
// holds unread bytes, by setting SO_RCVLOWAT to its default of 1: setting
// the low-water mark re-checks readiness. A BPF verdict program attached
// after bytes arrived sees them this way without waiting for more to come.
func (s Socket) Nudge() error {
	err := s.Control(func(fd uintptr) error {
		return unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	})
	if err != nil {
		return fmt.Errorf("setsockopt SO_RCVLOWAT: %w", err)
	}
	return nil
}

// Events is the socket's poll state.
type Events struct {
	// EOF: the peer's FIN arrived, or the connection was reset (POLLRDHUP).
	EOF bool
	// Hangup: both directions are shut down, by a reset or by a FIN each
	// way (POLLHUP).
	Hangup bool
	// Err is the error that was pending on the socket (POLLERR, SO_ERROR),
	// e.g. ECONNRESET; reading it cleared it.
	Err error
}

// IsBrokenPipe reports whether err, an Events.Err, is EPIPE: what the kernel
// records on a socket when bytes were queued for it after its sending side
// was shut down.
func IsBrokenPipe(err error) bool { return errors.Is(err, unix.EPIPE) }

// Wait blocks in Go's network poller, without reading, until cond holds for
// the socket's poll state, and returns that state. It returns early with the
// connection's error when the connection is closed or its read deadline
// passes, which is how a caller cancels it.
func (s Socket) Wait(cond func(Events) bool) (Events, error) {
	var ev Events
	var perr error
	err := s.rc.Read(func(fd uintptr) bool {
		ev, perr = poll(fd)
		return perr != nil || cond(ev)
	})
	if err != nil {
		return ev, err
	}
	return ev, perr
}

func poll(fd uintptr) (Events, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	for {
		_, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Events{}, fmt.Errorf("poll: %w", err)
		}
		re := fds[0].Revents
		ev := Events{EOF: re&unix.POLLRDHUP != 0, Hangup: re&unix.POLLHUP != 0}
		if re&unix.POLLERR != 0 {
			// Reading SO_ERROR clears it, so that a waiter that decides
			// the error is harmless does not see it again at once.
			e, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
			if err != nil {
				return Events{}, fmt.Errorf("getsockopt SO_ERROR: %w", err)
			}
			if e != 0 {
				ev.Err = unix.Errno(e)
			}
		}
		return ev, nil
	}
}
