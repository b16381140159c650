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
	"strings"
	"time"

	"github.com/novaedge/novaedge/slowpath/sockets/internal/fdpass"
	"github.com/novaedge/novaedge/slowpath/sockets/quicsteer"
)

// Handing sockets to a successor: the running agent listens on a Unix
// socket; a new agent connects, receives every open socket (as file
// descriptors, SCM_RIGHTS) with its key, starts serving them, and answers
// "ok". The old agent then stops accepting and drains. The listening
// sockets themselves never close, so no connection is refused during an
// upgrade: connections arriving in between wait in the kernel's accept
// queue for whichever process accepts next.
//
// QUIC sockets with steering (Set.SteerQUIC) are not served by the
// successor: the old agent has to keep reading its socket for the
// connections it owns. The exchange, compatible both ways with agents that
// predate it (they send no generation, and never ask for the steering):
//
//	old → new  header {keys, generation, steered} + one socket per key
//	new → old  "steer\n" (only if steered is not empty)
//	old → new  {steered} + program, socket array, newest slot, counters per steered key
//	new → old  "ok {steered}\n" naming the keys it took over with steering,
//	           or "ok\n" (an agent without steering)
//
// For each steered key the successor opens its own socket on the address
// (joining the reuseport group), puts it into the group's socket array at
// its generation, and closes the inherited descriptor; it becomes the
// newest generation when it starts serving (SteerQUIC). The old agent keeps
// serving those sockets' connections (Socket.HandedOff) and closes them
// when they have ended, which removes them from the group and the array.

// handoffHeader is the message that accompanies the descriptors.
type handoffHeader struct {
	Keys []string `json:"keys"` // "tcp 127.0.0.1:80", one per descriptor, in order
	// Generation is the sender's generation; nil from an agent that
	// predates QUIC steering.
	Generation *uint8 `json:"generation,omitempty"`
	// Steered names the UDP keys whose steering the sender can pass.
	Steered []string `json:"steered,omitempty"`
}

// steerHeader accompanies the steering descriptors (quicsteer.NumFDs per
// key, in quicsteer.Group.FDs order) and is the payload of the
// successor's confirmation.
type steerHeader struct {
	Steered []string `json:"steered"`
}

// maxHandoff bounds the descriptors passed in one message.
const maxHandoff = 250

// steerFDs is the number of descriptors of one key's steering.
const steerFDs = quicsteer.NumFDs

// ServeHandoff listens on path and gives the set's sockets to the first
// successor that connects and confirms; then it calls handedOff (the
// caller stops serving, closing its copies of the sockets; QUIC sockets the
// successor took over with steering report HandedOff and keep serving
// their connections) and returns. It returns nil without a handoff when ctx
// ends.
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
			s.log.Warn("handoff to a successor failed", "error", err)
			continue
		}
	}
}

// handOff sends the sockets over c and waits for the successor's "ok".
func (s *Set) handOff(c *net.UnixConn) (bool, error) {
	s.mu.Lock()
	gen := s.gen
	hdr := handoffHeader{Generation: &gen}
	var (
		fds    []int
		groups []*quicsteer.Group // clones, for the steered keys in order
	)
	defer func() {
		closeFDs(fds)
		for _, g := range groups {
			g.Close()
		}
	}()
	for k, sock := range s.socks {
		var conn any = sock.PacketConn
		if sock.Listener != nil {
			conn = sock.Listener
		}
		fd, err := fdpass.Dup(conn)
		if errors.Is(err, fdpass.ErrNotSocket) {
			continue // nothing a successor could take over
		}
		if err != nil {
			s.mu.Unlock()
			return false, fmt.Errorf("dup %s: %w", k, err)
		}
		hdr.Keys = append(hdr.Keys, k.String())
		fds = append(fds, fd)
		if sock.steer != nil && len(groups) < maxHandoff/steerFDs {
			// A clone: the socket (and its descriptors) may close while
			// the successor is still talking to us.
			g, err := sock.steer.Clone()
			if err != nil {
				s.log.Warn("successor gets this socket without QUIC steering", "socket", k.String(), "error", err)
				continue
			}
			hdr.Steered = append(hdr.Steered, k.String())
			groups = append(groups, g)
		}
	}
	s.mu.Unlock()
	if len(fds) > maxHandoff {
		return false, fmt.Errorf("%d sockets: more than %d", len(fds), maxHandoff)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := sendJSON(c, hdr, fds); err != nil {
		return false, fmt.Errorf("send sockets: %w", err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return false, fmt.Errorf("successor did not confirm: %w", err)
	}
	if line == "steer\n" {
		var sfds []int
		for _, g := range groups {
			f := g.FDs()
			sfds = append(sfds, f[:]...)
		}
		if err := sendJSON(c, steerHeader{Steered: hdr.Steered}, sfds); err != nil {
			return false, fmt.Errorf("send QUIC steering: %w", err)
		}
		if line, err = r.ReadString('\n'); err != nil {
			return false, fmt.Errorf("successor did not confirm: %w", err)
		}
	}
	switch {
	case line == "ok\n":
		return true, nil
	case strings.HasPrefix(line, "ok "):
		var taken steerHeader
		if err := json.Unmarshal([]byte(line[len("ok "):]), &taken); err != nil {
			// It took the sockets either way; without knowing which it
			// steers, stop serving all of them as before steering.
			s.log.Warn("successor's confirmation does not parse; QUIC connections end now", "error", err)
			return true, nil
		}
		s.mu.Lock()
		for _, ks := range taken.Steered {
			if k, err := ParseKey(ks); err == nil {
				if sock, ok := s.socks[k]; ok && sock.steer != nil {
					sock.handedOff.Store(true)
				}
			}
		}
		s.mu.Unlock()
		return true, nil
	}
	return false, nil
}

// sendJSON sends v as one line of JSON with fds attached.
func sendJSON(c *net.UnixConn, v any, fds []int) error {
	msg, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = fdpass.Rights(fds)
	}
	_, _, err = c.WriteMsgUnix(append(msg, '\n'), oob, nil)
	return err
}

// recvJSON receives one message (as sendJSON sends it) into v and returns
// the descriptors that came with it; max bounds them.
func recvJSON(c *net.UnixConn, v any, max int) ([]int, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, fdpass.Space(max))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	fds, err := fdpass.ParseRights(oob[:oobn])
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("bad header: %w", err)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		fdpass.Close(fd)
	}
}

// ErrNoPredecessor is returned by Inherit when no agent offers sockets.
var ErrNoPredecessor = errors.New("no running agent to take sockets from")

// Inherit connects to a predecessor's handoff socket at path and adopts
// the sockets it sends. It returns the keys adopted and a confirm function
// the caller calls once it serves them (the predecessor then stops
// accepting). Without a predecessor it returns ErrNoPredecessor.
//
// The set's generation becomes the predecessor's plus one. For each QUIC
// socket the predecessor steers, the set opens its own socket on the same
// address in the same reuseport group instead of adopting the
// predecessor's, which stays the predecessor's to serve its connections on
// (see the exchange above); SteerQUIC then makes it the newest.
func (s *Set) Inherit(path string) ([]Key, func() error, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isRefused(err) {
			return nil, nil, ErrNoPredecessor
		}
		return nil, nil, fmt.Errorf("handoff socket %s: %w", path, err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var hdr handoffHeader
	fds, err := recvJSON(c, &hdr, maxHandoff)
	if err == nil && len(hdr.Keys) != len(fds) {
		closeFDs(fds)
		err = fmt.Errorf("bad header (%d keys for %d descriptors)", len(hdr.Keys), len(fds))
	}
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("receive sockets: %w", err)
	}
	var errs []error
	steer := map[Key]*quicsteer.Group{}
	if hdr.Generation == nil {
		s.log.Info("the running agent predates QUIC steering: its HTTP/3 connections end with this handoff")
	} else {
		s.mu.Lock()
		s.gen = *hdr.Generation + 1
		s.mu.Unlock()
		if len(hdr.Steered) > 0 {
			if steer, err = s.receiveSteering(c, hdr.Steered); err != nil {
				// Take the sockets as before steering.
				errs = append(errs, err)
			}
		}
	}
	var (
		keys  []Key
		taken []string
	)
	for i, fd := range fds {
		k, err := ParseKey(hdr.Keys[i])
		f := os.NewFile(uintptr(fd), hdr.Keys[i])
		if err != nil {
			_ = f.Close()
			errs = append(errs, err)
			continue
		}
		if g := steer[k]; g != nil {
			delete(steer, k)
			err := s.joinGroup(k, g)
			if err == nil {
				_ = f.Close() // the predecessor's socket stays the predecessor's
				keys = append(keys, k)
				taken = append(taken, k.String())
				continue
			}
			// Take the predecessor's socket as before steering.
			errs = append(errs, err)
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
			if err != nil {
				_ = sock.Close()
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("adopt %s: %w", k, err))
			continue
		}
		keys = append(keys, k)
	}
	for _, g := range steer { // steering for keys without a socket
		g.Close()
	}
	confirm := func() error {
		defer func() { _ = c.Close() }()
		line := "ok\n"
		if hdr.Generation != nil {
			msg, err := json.Marshal(steerHeader{Steered: taken})
			if err != nil {
				return err
			}
			line = "ok " + string(msg) + "\n"
		}
		if _, err := io.WriteString(c, line); err != nil {
			return fmt.Errorf("confirm handoff: %w", err)
		}
		return nil
	}
	return keys, confirm, errors.Join(errs...)
}

// receiveSteering asks the predecessor for the steering of the keys it
// named and returns one Group per key.
func (s *Set) receiveSteering(c *net.UnixConn, named []string) (map[Key]*quicsteer.Group, error) {
	if len(named)*steerFDs > maxHandoff {
		return nil, fmt.Errorf("receive QUIC steering: %d keys, more than %d", len(named), maxHandoff/steerFDs)
	}
	if _, err := io.WriteString(c, "steer\n"); err != nil {
		return nil, fmt.Errorf("ask for QUIC steering: %w", err)
	}
	var sh steerHeader
	fds, err := recvJSON(c, &sh, len(named)*steerFDs)
	if err != nil {
		return nil, fmt.Errorf("receive QUIC steering: %w", err)
	}
	if len(fds) != steerFDs*len(sh.Steered) {
		closeFDs(fds)
		return nil, fmt.Errorf("receive QUIC steering: %d descriptors for %d keys", len(fds), len(sh.Steered))
	}
	out := map[Key]*quicsteer.Group{}
	var errs []error
	for i, ks := range sh.Steered {
		own := [steerFDs]int(fds[steerFDs*i : steerFDs*(i+1)])
		k, err := ParseKey(ks)
		if err != nil || k.Network != "udp" {
			closeFDs(own[:])
			errs = append(errs, fmt.Errorf("receive QUIC steering for %q: not a UDP key", ks))
			continue
		}
		g, err := quicsteer.FromFDs(own)
		if err != nil {
			errs = append(errs, fmt.Errorf("receive QUIC steering for %s: %w", k, err))
			continue
		}
		out[k] = g
	}
	return out, errors.Join(errs...)
}

// joinGroup opens this process's socket for k in the reuseport group of
// the predecessor's and puts it into the group's socket array at this
// process's generation; g belongs to the new socket from then on (closed
// here on failure). The group always has the predecessor's socket while
// this happens, so it is never without one.
func (s *Set) joinGroup(k Key, g *quicsteer.Group) error {
	sock, err := listenUDPSocket(context.Background(), k)
	if err != nil {
		g.Close()
		return fmt.Errorf("take over %s with QUIC steering: open: %w", k, err)
	}
	if err := g.Join(sock.PacketConn, s.Generation()); err != nil {
		g.Close()
		_ = sock.Close() // leaves the group again
		return fmt.Errorf("take over %s with QUIC steering: %w", k, err)
	}
	sock.steer = g
	if err := s.Adopt(sock); err != nil {
		_ = sock.Close()
		return fmt.Errorf("take over %s with QUIC steering: %w", k, err)
	}
	return nil
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
