package sockets

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/novaedge/novaedge/slowpath/sockets/internal/fdpass"
)

// Handing sockets to a successor: the running agent listens on a Unix
// socket; a new agent connects, receives every open socket (as file
// descriptors, SCM_RIGHTS) with its key, starts serving them, and answers
// "ok". The old agent then stops accepting and drains. The listening
// sockets themselves never close, so no connection is refused during an
// upgrade: connections arriving in between wait in the kernel's accept
// queue for whichever process accepts next.

// handoffHeader is the message that accompanies the descriptors.
type handoffHeader struct {
	Keys []string `json:"keys"` // "tcp 127.0.0.1:80", one per descriptor, in order
}

// maxHandoff bounds the sockets passed in one message.
const maxHandoff = 250

// ServeHandoff listens on path and gives the set's sockets to the first
// successor that connects and confirms; then it calls handedOff (the
// caller stops serving, closing its copies of the sockets) and returns.
// It returns nil without a handoff when ctx ends.
func (s *Set) ServeHandoff(ctx context.Context, path string, handedOff func()) error {
	_ = os.Remove(path) // a predecessor's leftover; a live one would have handed off to us
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("handoff socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return fmt.Errorf("handoff socket: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	defer func() { _ = ln.Close() }()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("handoff socket: %w", err)
		}
		ok, err := s.handOff(c)
		_ = c.Close()
		if ok {
			handedOff()
			return nil
		}
		if err != nil && ctx.Err() == nil {
			// A failed attempt changes nothing here; the next one may work.
			continue
		}
	}
}

// handOff sends the sockets over c and waits for the successor's "ok".
func (s *Set) handOff(c *net.UnixConn) (bool, error) {
	s.mu.Lock()
	var (
		hdr   handoffHeader
		files []*os.File
	)
	for k, sock := range s.socks {
		var (
			f   *os.File
			err error
		)
		switch {
		case sock.Listener != nil:
			fl, ok := sock.Listener.(interface{ File() (*os.File, error) })
			if !ok {
				continue
			}
			f, err = fl.File()
		default:
			fp, ok := sock.PacketConn.(interface{ File() (*os.File, error) })
			if !ok {
				continue
			}
			f, err = fp.File()
		}
		if err != nil {
			s.mu.Unlock()
			closeFiles(files)
			return false, fmt.Errorf("dup %s: %w", k, err)
		}
		hdr.Keys = append(hdr.Keys, k.String())
		files = append(files, f)
	}
	s.mu.Unlock()
	defer closeFiles(files)
	if len(files) > maxHandoff {
		return false, fmt.Errorf("%d sockets: more than %d", len(files), maxHandoff)
	}
	msg, err := json.Marshal(hdr)
	if err != nil {
		return false, err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, _, err := c.WriteMsgUnix(append(msg, '\n'), fdpass.Rights(fds), nil); err != nil {
		return false, fmt.Errorf("send sockets: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false, fmt.Errorf("successor did not confirm: %w", err)
	}
	return line == "ok\n", nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// ErrNoPredecessor is returned by Inherit when no agent offers sockets.
var ErrNoPredecessor = errors.New("no running agent to take sockets from")

// Inherit connects to a predecessor's handoff socket at path and adopts
// the sockets it sends. It returns the keys adopted and a confirm function
// the caller calls once it serves them (the predecessor then stops
// accepting). Without a predecessor it returns ErrNoPredecessor.
func (s *Set) Inherit(path string) ([]Key, func() error, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isRefused(err) {
			return nil, nil, ErrNoPredecessor
		}
		return nil, nil, fmt.Errorf("handoff socket %s: %w", path, err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 64<<10)
	oob := make([]byte, fdpass.Space(maxHandoff))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("receive sockets: %w", err)
	}
	fds, err := fdpass.ParseRights(oob[:oobn])
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	var hdr handoffHeader
	if err := json.Unmarshal(buf[:n], &hdr); err != nil || len(hdr.Keys) != len(fds) {
		for _, fd := range fds {
			fdpass.Close(fd)
		}
		_ = c.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("receive sockets: bad header (%d keys for %d descriptors): %w", len(hdr.Keys), len(fds), err)
		}
		return nil, nil, fmt.Errorf("receive sockets: bad header (%d keys for %d descriptors)", len(hdr.Keys), len(fds))
	}
	var (
		keys []Key
		errs []error
	)
	for i, fd := range fds {
		k, err := ParseKey(hdr.Keys[i])
		f := os.NewFile(uintptr(fd), hdr.Keys[i])
		if err != nil {
			_ = f.Close()
			errs = append(errs, err)
			continue
		}
		sock := &Socket{Key: k}
		if k.Network == "udp" {
			sock.PacketConn, err = net.FilePacketConn(f)
		} else {
			sock.Listener, err = net.FileListener(f)
		}
		_ = f.Close() // net.File* dup the descriptor
		if err == nil {
			err = s.Adopt(sock)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt %s: %w", k, err))
			continue
		}
		keys = append(keys, k)
	}
	confirm := func() error {
		defer func() { _ = c.Close() }()
		if _, err := io.WriteString(c, "ok\n"); err != nil {
			return fmt.Errorf("confirm handoff: %w", err)
		}
		return nil
	}
	return keys, confirm, errors.Join(errs...)
}

func isRefused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		var se *os.SyscallError
		if errors.As(op.Err, &se) {
			return se.Syscall == "connect"
		}
	}
	return false
}

// ParseKey parses Key.String's form, "tcp 127.0.0.1:80".
func ParseKey(s string) (Key, error) {
	var network, addr string
	if _, err := fmt.Sscanf(s, "%s %s", &network, &addr); err != nil {
		return Key{}, fmt.Errorf("socket key %q: %w", s, err)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return Key{}, fmt.Errorf("socket key %q: %w", s, err)
	}
	if network != "tcp" && network != "udp" {
		return Key{}, fmt.Errorf("socket key %q: unknown network", s)
	}
	return Key{Network: network, Addr: ap}, nil
}
