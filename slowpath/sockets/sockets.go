// Package sockets keeps the slow path's listening sockets open across
// configurations: a reload opens only the sockets it adds and closes only
// the ones it removes, so a listener that stays never has an accept gap and
// its established connections are never cut.
package sockets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/novaedge/novaedge/slowpath/sockets/internal/reuseport"
	"github.com/novaedge/novaedge/slowpath/sockets/quicsteer"
	"github.com/novaedge/novaedge/vip/local"
)

// Key identifies a socket: "tcp" or "udp" and the address and port it is
// bound to (an unspecified address binds every address of its family).
type Key struct {
	Network string
	Addr    netip.AddrPort
}

// String returns "tcp 127.0.10.1:8080".
func (k Key) String() string { return k.Network + " " + k.Addr.String() }

// Compare orders keys by network, then address and port.
func (k Key) Compare(o Key) int {
	if k.Network != o.Network {
		if k.Network < o.Network {
			return -1
		}
		return 1
	}
	return k.Addr.Compare(o.Addr)
}

// Socket is one open socket: Listener for tcp, PacketConn for udp.
type Socket struct {
	Key        Key
	Listener   net.Listener
	PacketConn net.PacketConn

	// steer is the QUIC steering of the socket's reuseport group (see
	// SteerQUIC); nil while the socket is not steered.
	steer *quicsteer.Group
	// activated is set once the socket's generation is the group's newest.
	activated bool
	// handedOff is set when a successor took over the socket's reuseport
	// group with steering: this process keeps serving the QUIC
	// connections it has on the socket until they end.
	handedOff atomic.Bool
}

// Close closes the socket and this process's handle on its steering.
func (s *Socket) Close() error {
	var err error
	if s.Listener != nil {
		err = s.Listener.Close()
	} else {
		err = s.PacketConn.Close()
	}
	if s.steer != nil {
		s.steer.Close()
	}
	return err
}

// HandedOff reports whether a successor took over this UDP socket's
// reuseport group with QUIC steering: new connections go to the
// successor, while the connections this process has keep reaching this
// socket, so the caller keeps serving them until they end.
func (s *Socket) HandedOff() bool { return s.handedOff.Load() }

// Steered reports whether the socket's QUIC packets are steered by
// generation (SteerQUIC succeeded or the steering was inherited).
func (s *Socket) Steered() bool { return s.steer != nil }

// SteeringStats returns the counters of the socket's QUIC steering
// program (shared by every process of its reuseport group).
func (s *Socket) SteeringStats() (quicsteer.Stats, error) {
	if s.steer == nil {
		return quicsteer.Stats{}, fmt.Errorf("socket %s: %w", s.Key, ErrNoSteering)
	}
	return s.steer.Stats()
}

// Set is the open sockets. It is safe for concurrent use.
type Set struct {
	mu    sync.Mutex
	socks map[Key]*Socket
	// listen opens sockets; tests and fd inheritance replace it.
	listen func(ctx context.Context, k Key) (*Socket, error)
	// gen is this process's generation: 0 for a fresh start, the
	// predecessor's plus one after Inherit.
	gen uint8
	log *slog.Logger
	// noSteer is set once the lack of QUIC steering has been logged.
	noSteer atomic.Bool
}

// NewSet returns an empty set whose sockets are opened with IP_FREEBIND,
// so a listener never waits for its VIP address to be up. UDP sockets also
// get SO_REUSEPORT, so that a successor can open its own socket next to
// this process's (see SteerQUIC).
func NewSet() *Set {
	return &Set{socks: map[Key]*Socket{}, listen: listenFreebind, log: slog.New(slog.DiscardHandler)}
}

// SetLogger sets where the set logs what it cannot do (QUIC steering
// unavailable, a predecessor too old to hand it over). Nil: discard.
func (s *Set) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	s.mu.Lock()
	s.log = l
	s.mu.Unlock()
}

// Generation returns the process's generation, which the QUIC servers
// write into the first byte of their connection IDs.
func (s *Set) Generation() uint8 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

func listenFreebind(ctx context.Context, k Key) (*Socket, error) {
	if k.Network == "udp" {
		// SO_REUSEPORT would let a second agent on the same address share
		// the port silently; a plain bind first still makes that fail
		// (only a successor joins a group, through Inherit).
		probe, err := listenUDP(ctx, k, false)
		if err != nil {
			return nil, err
		}
		_ = probe.Close()
		return listenUDPSocket(ctx, k)
	}
	l, err := local.Listen(ctx, ipNetwork(k), k.Addr.String())
	if err != nil {
		return nil, err
	}
	return &Socket{Key: k, Listener: l}, nil
}

// listenUDPSocket opens k as a member of its address's reuseport group.
func listenUDPSocket(ctx context.Context, k Key) (*Socket, error) {
	pc, err := listenUDP(ctx, k, true)
	if err != nil {
		return nil, err
	}
	return &Socket{Key: k, PacketConn: pc}, nil
}

// listenUDP binds k with IP_FREEBIND and, if shared, SO_REUSEPORT.
func listenUDP(ctx context.Context, k Key, shared bool) (net.PacketConn, error) {
	lc := local.ListenConfig()
	if shared {
		lc.Control = reuseport.Wrap(lc.Control)
	}
	return lc.ListenPacket(ctx, ipNetwork(k), k.Addr.String())
}

func ipNetwork(k Key) string {
	if k.Addr.Addr().Is6() {
		return k.Network + "6"
	}
	return k.Network + "4"
}

// ErrNoSteering is wrapped by SteerQUIC's error when the kernel cannot
// steer (the program does not load or attach, or the socket is not in a
// reuseport group).
var ErrNoSteering = errors.New("QUIC steering unavailable")

// SteerQUIC makes the UDP socket k steer QUIC packets by generation (see
// package quicsteer) and makes this process's generation the newest of its
// reuseport group, so that new connections come to this process. Call it
// when a QUIC server starts serving the socket. A socket inherited with
// steering only becomes the newest; a socket without it loads a new
// program. Without steering (an error wrapping ErrNoSteering, which the
// set logs once) the socket is served as before: a restart resets its
// connections.
func (s *Set) SteerQUIC(k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sock, ok := s.socks[k]
	if !ok || sock.PacketConn == nil {
		return fmt.Errorf("steer %s: no UDP socket", k)
	}
	if sock.activated {
		return nil
	}
	if sock.steer == nil {
		g, err := quicsteer.New()
		if err != nil {
			return s.noSteering(k, err)
		}
		if err := g.Join(sock.PacketConn, s.gen); err != nil {
			g.Close()
			return s.noSteering(k, err)
		}
		sock.steer = g
	}
	if err := sock.steer.Activate(s.gen); err != nil {
		return s.noSteering(k, err)
	}
	sock.activated = true
	return nil
}

// SteeringStats returns the QUIC steering counters of the steered UDP
// sockets (shared by every process of a socket's reuseport group). A
// socket whose counters cannot be read is left out.
func (s *Set) SteeringStats() map[Key]quicsteer.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[Key]quicsteer.Stats{}
	for k, sock := range s.socks {
		if sock.steer == nil {
			continue
		}
		if st, err := sock.steer.Stats(); err == nil {
			out[k] = st
		}
	}
	return out
}

// noSteering logs the first socket without steering and returns the error.
func (s *Set) noSteering(k Key, err error) error {
	err = fmt.Errorf("steer %s: %w: %w", k, ErrNoSteering, err)
	if !s.noSteer.Swap(true) {
		s.log.Warn("HTTP/3 connections will be reset by agent restarts: no QUIC steering", "socket", k.String(), "error", err)
	}
	return err
}

// Open opens the sockets of want that are not open yet and returns them;
// sockets already open are left alone. A socket that cannot be opened is
// reported in the error (naming it); the others are opened regardless.
func (s *Set) Open(ctx context.Context, want []Key) ([]*Socket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		opened []*Socket
		errs   []error
	)
	for _, k := range want {
		if _, ok := s.socks[k]; ok {
			continue
		}
		if k.Network != "tcp" && k.Network != "udp" {
			errs = append(errs, fmt.Errorf("listen %s: unknown network", k))
			continue
		}
		sock, err := s.listen(ctx, k)
		if err != nil {
			errs = append(errs, fmt.Errorf("listen %s: %w", k, err))
			continue
		}
		s.socks[k] = sock
		opened = append(opened, sock)
	}
	return opened, errors.Join(errs...)
}

// CloseExcept closes every socket whose key is not in keep and returns the
// keys it closed.
func (s *Set) CloseExcept(keep []Key) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	var closed []Key
	for k, sock := range s.socks {
		if slices.Contains(keep, k) {
			continue
		}
		_ = sock.Close() // closing a listener cannot fail in a way we could act on
		delete(s.socks, k)
		closed = append(closed, k)
	}
	slices.SortFunc(closed, Key.Compare)
	return closed
}

// Keys returns the open sockets' keys, sorted.
func (s *Set) Keys() []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Key, 0, len(s.socks))
	for k := range s.socks {
		out = append(out, k)
	}
	slices.SortFunc(out, Key.Compare)
	return out
}

// Get returns the open socket for k.
func (s *Set) Get(k Key) (*Socket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sock, ok := s.socks[k]
	return sock, ok
}

// Close closes every socket.
func (s *Set) Close() { s.CloseExcept(nil) }

// Adopt adds an already open socket, e.g. one inherited from the previous
// agent process, so a later Open for its key keeps it instead of binding
// again. A socket already present for the key is an error.
func (s *Set) Adopt(sock *Socket) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.socks[sock.Key]; ok {
		return fmt.Errorf("adopt %s: already open", sock.Key)
	}
	if (sock.Listener == nil) == (sock.PacketConn == nil) {
		return fmt.Errorf("adopt %s: need exactly one of Listener and PacketConn", sock.Key)
	}
	s.socks[sock.Key] = sock
	return nil
}

// Detach removes the socket for k from the set without closing it and
// returns it, for a caller that must close it later (a QUIC server shuts
// its connections down before its UDP socket goes).
func (s *Set) Detach(k Key) (*Socket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sock, ok := s.socks[k]
	delete(s.socks, k)
	return sock, ok
}
