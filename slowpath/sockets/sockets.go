// Package sockets keeps the slow path's listening sockets open across
// configurations: a reload opens only the sockets it adds and closes only
// the ones it removes, so a listener that stays never has an accept gap and
// its established connections are never cut.
package sockets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

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
}

func (s *Socket) close() error {
	if s.Listener != nil {
		return s.Listener.Close()
	}
	return s.PacketConn.Close()
}

// Set is the open sockets. It is safe for concurrent use.
type Set struct {
	mu    sync.Mutex
	socks map[Key]*Socket
	// listen opens sockets; tests and fd inheritance replace it.
	listen func(ctx context.Context, k Key) (*Socket, error)
}

// NewSet returns an empty set whose sockets are opened with IP_FREEBIND,
// so a listener never waits for its VIP address to be up.
func NewSet() *Set {
	return &Set{socks: map[Key]*Socket{}, listen: listenFreebind}
}

func listenFreebind(ctx context.Context, k Key) (*Socket, error) {
	network := k.Network + "4"
	if k.Addr.Addr().Is6() {
		network = k.Network + "6"
	}
	s := &Socket{Key: k}
	var err error
	if k.Network == "udp" {
		s.PacketConn, err = local.ListenPacket(ctx, network, k.Addr.String())
	} else {
		s.Listener, err = local.Listen(ctx, network, k.Addr.String())
	}
	if err != nil {
		return nil, err
	}
	return s, nil
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
		_ = sock.close() // closing a listener cannot fail in a way we could act on
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
