package baseproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Serve proxies connections to addr to backend until it fails. It finds
// the end of each request head, sends the request unchanged over an idle
// backend connection, finds the end of the response by its Content-Length
// and sends it back: no routing, no header handling, no timeouts. Requests
// with a body, and responses without a Content-Length, end the connection.
// Reads and writes are raw non-blocking system calls (no runtime
// bookkeeping); only epoll_wait blocks. Its rate is an upper bound for a
// Go proxy built on an event loop on this machine: a real one adds parsing,
// routing and header rewriting on top.
func Serve(addr, backend string) error {
	runtime.LockOSThread()
	lfd, err := listenFD(addr)
	if err != nil {
		return err
	}
	baddr, err := sockaddr(backend)
	if err != nil {
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	l := &eloop{ep: ep, backend: baddr, conns: map[int]*econn{}}
	if err := l.watch(lfd, unix.EPOLLIN); err != nil {
		return err
	}
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				l.accept(lfd)
				continue
			}
			if c := l.conns[fd]; c != nil {
				l.readable(c, buf)
			}
		}
	}
}

type econn struct {
	fd       int
	upstream bool
	peer     *econn // the other side while a request is in flight
	in       []byte // bytes read and not yet forwarded
}

type eloop struct {
	ep      int
	backend unix.Sockaddr
	conns   map[int]*econn
	idle    []*econn // backend connections without a request
}

func (l *eloop) watch(fd int, events uint32) error {
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

func (l *eloop) accept(lfd int) {
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or nothing worth more than a retry on the next event
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &econn{fd: fd}
		if l.watch(fd, unix.EPOLLIN) != nil {
			_ = unix.Close(fd)
			continue
		}
		l.conns[fd] = c
	}
}

// readable reads what c has (level-triggered: one read per event) and
// moves requests and responses along.
func (l *eloop) readable(c *econn, buf []byte) {
	n, errno := rawIO(unix.SYS_READ, c.fd, buf)
	switch {
	case errno == unix.EAGAIN:
		return
	case errno != 0 || n == 0:
		l.close(c)
		return
	}
	c.in = append(c.in, buf[:n]...)
	if c.upstream {
		l.answer(c)
	} else {
		l.request(c)
	}
}

// request sends c's next complete request head to a backend connection.
func (l *eloop) request(c *econn) {
	if c.peer != nil {
		return // pipelined: sent when the answer in flight is done
	}
	end := bytes.Index(c.in, []byte("\r\n\r\n"))
	if end < 0 {
		return
	}
	end += 4
	head := c.in[:end]
	if contentLength(head) != 0 {
		l.close(c) // a body: not this measuring stick's business
		return
	}
	u := l.backendConn()
	if u == nil || !writeAll(u.fd, head) {
		l.close(c)
		if u != nil {
			l.close(u)
		}
		return
	}
	c.in = c.in[:copy(c.in, c.in[end:])]
	c.peer, u.peer = u, c
}

// answer sends u's response to its client once it is complete.
func (l *eloop) answer(u *econn) {
	c := u.peer
	end := bytes.Index(u.in, []byte("\r\n\r\n"))
	if c == nil || end < 0 {
		if c == nil {
			l.close(u) // an answer nobody asked for
		}
		return
	}
	cl := contentLength(u.in[:end+4])
	if cl < 0 {
		l.close(u)
		l.close(c)
		return
	}
	total := end + 4 + cl
	if len(u.in) < total {
		return
	}
	if !writeAll(c.fd, u.in[:total]) {
		l.close(c)
		return
	}
	u.in = u.in[:copy(u.in, u.in[total:])]
	u.peer, c.peer = nil, nil
	l.idle = append(l.idle, u)
	l.request(c) // a pipelined request may be waiting
}

func (l *eloop) backendConn() *econn {
	if n := len(l.idle); n > 0 {
		u := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return u
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// A blocking connect to a loopback backend: done at once, and only
	// while the pool fills.
	if unix.Connect(fd, l.backend) != nil || unix.SetNonblock(fd, true) != nil || l.watch(fd, unix.EPOLLIN) != nil {
		_ = unix.Close(fd)
		return nil
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	u := &econn{fd: fd, upstream: true}
	l.conns[fd] = u
	return u
}

func (l *eloop) close(c *econn) {
	if l.conns[c.fd] != c {
		return
	}
	delete(l.conns, c.fd)
	_ = unix.Close(c.fd) // also leaves the epoll set
	if p := c.peer; p != nil {
		p.peer = nil
		if p.upstream {
			l.close(p) // mid-answer: no use to anyone
		}
	}
	for i, u := range l.idle {
		if u == c {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			break
		}
	}
}

// contentLength is the head's Content-Length, 0 without one, or -1 when
// it is unreadable or the body is chunked.
func contentLength(head []byte) int {
	if bytes.Contains(head, []byte("\nTransfer-Encoding:")) {
		return -1
	}
	for _, name := range [][]byte{[]byte("\nContent-Length:"), []byte("\ncontent-length:")} {
		i := bytes.Index(head, name)
		if i < 0 {
			continue
		}
		v := head[i+len(name):]
		v = v[:bytes.IndexByte(v, '\r')]
		n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
		if err != nil || n < 0 {
			return -1
		}
		return n
	}
	return 0
}

// rawIO is read(2) or write(2) without the runtime's system call
// bookkeeping: the descriptors are non-blocking, so neither blocks.
func rawIO(trap uintptr, fd int, b []byte) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), errno
}

// writeAll writes b whole; small answers and requests fit the socket
// buffer, so a short write ends the connection rather than waiting.
func writeAll(fd int, b []byte) bool {
	n, errno := rawIO(unix.SYS_WRITE, fd, b)
	return errno == 0 && n == len(b)
}

func listenFD(addr string) (int, error) {
	sa, err := sockaddr(addr)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, sa); err != nil {
		return -1, fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, 1024); err != nil {
		return -1, fmt.Errorf("listen %s: %w", addr, err)
	}
	return fd, nil
}

func sockaddr(addr string) (*unix.SockaddrInet4, error) {
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("address %s: %w", addr, err)
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	return sa, nil
}
