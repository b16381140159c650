package l4

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for zero UDPProxy fields.
const (
	DefaultUDPIdle        = time.Minute
	DefaultUDPMaxSessions = 1024
	// DefaultUDPMaxDatagram fits any UDP payload over IPv4 or IPv6
	// (jumbograms aside).
	DefaultUDPMaxDatagram = 65535
)

// UDPProxy relays datagrams for one listening UDP socket. Each client
// address gets a session with its own connected upstream socket, chosen by
// Pick when the session starts; the upstream's replies go back to the client
// from the listening socket, so the client sees the address it sent to. A
// session ends after Idle without traffic either way, or when its upstream
// socket fails (e.g. ICMP port unreachable); the client's next datagram then
// starts a new session, calling Pick again.
//
// The fields must be set before Serve and not changed afterwards. Memory: a
// session holds one receive buffer of MaxDatagram+1 bytes, so the worst case
// is about MaxSessions × MaxDatagram (64 MiB with the defaults).
type UDPProxy struct {
	// Conn is the listening socket. Serve reads from it and sends replies
	// through it; it never closes it. Required.
	Conn net.PacketConn
	// Pick chooses the upstream "host:port" for a new session's client
	// (an IPv4-mapped IPv6 client address is passed unmapped); ok false
	// drops the datagram. It is called once per session, from Serve's
	// goroutine, and not for clients dropped by MaxSessions. Required.
	Pick func(client netip.AddrPort) (upstream string, ok bool)
	// Dial opens a session's connected upstream socket. If nil, a
	// net.Dialer dials network "udp"; an upstream given as a host name is
	// then resolved on Serve's goroutine, holding up every client, so Pick
	// should return IP:port.
	Dial func(ctx context.Context, upstream string) (net.Conn, error)
	// Idle ends a session after that long without a datagram either way.
	// Sessions are swept every Idle/4, so one ends between Idle and 1.25×Idle
	// after its last datagram. Zero or negative means DefaultUDPIdle.
	Idle time.Duration
	// MaxSessions bounds the concurrent sessions; datagrams from new
	// clients beyond it are dropped and counted in UDPStats.DroppedLimit.
	// Zero or negative means DefaultUDPMaxSessions.
	MaxSessions int
	// MaxDatagram is the largest datagram relayed either way; larger ones
	// are dropped (never truncated) and counted. Zero or negative means
	// DefaultUDPMaxDatagram.
	MaxDatagram int
	// Now is the clock idle expiry reads. If nil, time.Now is used.
	Now func() time.Time
	// Logger receives per-session debug events. If nil, nothing is logged.
	Logger *slog.Logger

	// Settled from the fields by Serve.
	idle        time.Duration
	maxSessions int
	maxDatagram int
	now         func() time.Time
	log         *slog.Logger
	replies     sync.WaitGroup

	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession

	created, expired                               atomic.Uint64
	droppedLimit, droppedNoUpstream, droppedErrors atomic.Uint64
	droppedOversize, dialErrors                    atomic.Uint64
}

// UDPStats counts a UDPProxy's sessions and dropped datagrams since it was
// created.
type UDPStats struct {
	// Sessions is the number of sessions open now.
	Sessions int
	// SessionsCreated and SessionsExpired count sessions started and
	// ended by Idle.
	SessionsCreated, SessionsExpired uint64
	// DroppedLimit counts datagrams from new clients dropped because
	// MaxSessions sessions were open.
	DroppedLimit uint64
	// DroppedNoUpstream counts datagrams dropped because Pick returned
	// false or Dial failed (DialErrors counts the latter alone).
	DroppedNoUpstream, DialErrors uint64
	// DroppedOversize counts datagrams longer than MaxDatagram, either way.
	DroppedOversize uint64
	// DroppedErrors counts datagrams lost to write errors, either way.
	DroppedErrors uint64
}

type udpSession struct {
	client   netip.AddrPort // as received: the key and the reply address
	upstream string
	up       net.Conn
	last     atomic.Int64 // Unix nanoseconds of the last datagram either way
}

func (s *udpSession) touch(now time.Time) { s.last.Store(now.UnixNano()) }

// aLongTimeAgo is a read deadline in the past, to unblock a pending read.
var aLongTimeAgo = time.Unix(1, 0)

// Serve relays datagrams until ctx ends or Conn is closed, returning nil in
// both cases, or until reading Conn fails otherwise. Before returning it
// closes every session and waits for their goroutines, and clears the read
// deadline it used on Conn to stop reading. Serve must not run concurrently
// with itself.
func (u *UDPProxy) Serve(ctx context.Context) error {
	if u.Conn == nil || u.Pick == nil {
		return errors.New("udp proxy: Conn and Pick are required")
	}
	u.settle()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	unblocked := make(chan struct{})
	context.AfterFunc(ctx, func() {
		_ = u.Conn.SetReadDeadline(aLongTimeAgo)
		close(unblocked)
	})

	sweeperDone := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() { u.sweep(sweeperDone) })

	err := u.readLoop(ctx)

	cancel()
	<-unblocked
	_ = u.Conn.SetReadDeadline(time.Time{})
	close(sweeperDone)
	sweeper.Wait()
	u.mu.Lock()
	all := u.sessions
	u.sessions = make(map[netip.AddrPort]*udpSession)
	u.mu.Unlock()
	for _, s := range all {
		_ = s.up.Close()
	}
	u.replies.Wait()
	return err
}

// Sessions returns the number of sessions open now.
func (u *UDPProxy) Sessions() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.sessions)
}

// Stats returns the proxy's counters.
func (u *UDPProxy) Stats() UDPStats {
	return UDPStats{
		Sessions:          u.Sessions(),
		SessionsCreated:   u.created.Load(),
		SessionsExpired:   u.expired.Load(),
		DroppedLimit:      u.droppedLimit.Load(),
		DroppedNoUpstream: u.droppedNoUpstream.Load(),
		DialErrors:        u.dialErrors.Load(),
		DroppedOversize:   u.droppedOversize.Load(),
		DroppedErrors:     u.droppedErrors.Load(),
	}
}

func (u *UDPProxy) settle() {
	u.idle = u.Idle
	if u.idle <= 0 {
		u.idle = DefaultUDPIdle
	}
	u.maxSessions = u.MaxSessions
	if u.maxSessions <= 0 {
		u.maxSessions = DefaultUDPMaxSessions
	}
	u.maxDatagram = u.MaxDatagram
	if u.maxDatagram <= 0 {
		u.maxDatagram = DefaultUDPMaxDatagram
	}
	u.now = u.Now
	if u.now == nil {
		u.now = time.Now
	}
	u.log = u.Logger
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	u.mu.Lock()
	u.sessions = make(map[netip.AddrPort]*udpSession)
	u.mu.Unlock()
}

func (u *UDPProxy) readLoop(ctx context.Context) error {
	// One byte more than allowed, so that an oversize datagram shows as
	// such instead of arriving silently truncated.
	buf := make([]byte, u.maxDatagram+1)
	for {
		n, client, err := u.readFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("udp proxy: read: %w", err)
		}
		if !client.IsValid() {
			continue
		}
		if n > u.maxDatagram {
			u.droppedOversize.Add(1)
			continue
		}
		s := u.session(ctx, client)
		if s == nil {
			continue
		}
		if _, err := s.up.Write(buf[:n]); err != nil {
			u.droppedErrors.Add(1)
			u.log.Debug("udp session ends: upstream write failed", "client", client, "upstream", s.upstream, "error", err)
			u.endSession(s)
		}
	}
}

// session returns client's session, starting one if there is room and Pick
// and Dial agree; nil means drop the datagram.
func (u *UDPProxy) session(ctx context.Context, client netip.AddrPort) *udpSession {
	now := u.now()
	u.mu.Lock()
	s, ok := u.sessions[client]
	if ok {
		// Under the lock, so that a sweep running now sees the session
		// as active rather than close it under the datagram.
		s.touch(now)
	}
	full := len(u.sessions) >= u.maxSessions
	u.mu.Unlock()
	if ok {
		return s
	}
	if full {
		u.droppedLimit.Add(1)
		return nil
	}
	// Only this goroutine adds sessions, so the room checked above is
	// still there below.
	upstream, ok := u.Pick(netip.AddrPortFrom(client.Addr().Unmap(), client.Port()))
	if !ok {
		u.droppedNoUpstream.Add(1)
		return nil
	}
	c, err := u.dial(ctx, upstream)
	if err != nil {
		u.dialErrors.Add(1)
		u.droppedNoUpstream.Add(1)
		u.log.Debug("udp session not started: dial failed", "client", client, "upstream", upstream, "error", err)
		return nil
	}
	s = &udpSession{client: client, upstream: upstream, up: c}
	s.touch(now)
	u.mu.Lock()
	u.sessions[client] = s
	u.created.Add(1)
	u.mu.Unlock()
	u.log.Debug("udp session started", "client", client, "upstream", upstream)
	u.replies.Go(func() { u.relayReplies(s) })
	return s
}

func (u *UDPProxy) dial(ctx context.Context, upstream string) (net.Conn, error) {
	if u.Dial != nil {
		return u.Dial(ctx, upstream)
	}
	var d net.Dialer
	return d.DialContext(ctx, "udp", upstream)
}

// relayReplies sends s's upstream datagrams to its client until the
// upstream socket is closed or fails.
func (u *UDPProxy) relayReplies(s *udpSession) {
	buf := make([]byte, u.maxDatagram+1)
	for {
		n, err := s.up.Read(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				u.log.Debug("udp session ends: upstream read failed", "client", s.client, "upstream", s.upstream, "error", err)
			}
			u.endSession(s)
			return
		}
		if n > u.maxDatagram {
			u.droppedOversize.Add(1)
			continue
		}
		s.touch(u.now())
		if err := u.writeTo(buf[:n], s.client); err != nil {
			u.droppedErrors.Add(1)
			if errors.Is(err, net.ErrClosed) {
				u.endSession(s)
				return
			}
			u.log.Debug("udp reply dropped", "client", s.client, "upstream", s.upstream, "error", err)
		}
	}
}

// endSession removes s, unless a newer session replaced it already, and
// closes its upstream socket.
func (u *UDPProxy) endSession(s *udpSession) {
	u.mu.Lock()
	if u.sessions[s.client] == s {
		delete(u.sessions, s.client)
	}
	u.mu.Unlock()
	_ = s.up.Close()
}

// sweep expires idle sessions every Idle/4 until done is closed.
func (u *UDPProxy) sweep(done <-chan struct{}) {
	t := time.NewTicker(max(u.idle/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			u.expire(u.now())
		}
	}
}

// expire ends the sessions idle for Idle or longer at now and returns how
// many it ended.
func (u *UDPProxy) expire(now time.Time) int {
	var idle []*udpSession
	u.mu.Lock()
	for k, s := range u.sessions {
		if now.Sub(time.Unix(0, s.last.Load())) >= u.idle {
			delete(u.sessions, k)
			idle = append(idle, s)
		}
	}
	// Counted before the lock goes, so that nobody sees the sessions gone
	// but not yet counted as expired.
	u.expired.Add(uint64(len(idle)))
	u.mu.Unlock()
	for _, s := range idle {
		_ = s.up.Close()
		u.log.Debug("udp session expired", "client", s.client, "upstream", s.upstream)
	}
	return len(idle)
}

func (u *UDPProxy) readFrom(b []byte) (int, netip.AddrPort, error) {
	if uc, ok := u.Conn.(*net.UDPConn); ok {
		return uc.ReadFromUDPAddrPort(b)
	}
	n, addr, err := u.Conn.ReadFrom(b)
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return n, netip.AddrPort{}, nil // not UDP: dropped by the caller
	}
	return n, ua.AddrPort(), nil
}

func (u *UDPProxy) writeTo(b []byte, client netip.AddrPort) error {
	if uc, ok := u.Conn.(*net.UDPConn); ok {
		_, err := uc.WriteToUDPAddrPort(b, client)
		return err
	}
	_, err := u.Conn.WriteTo(b, net.UDPAddrFromAddrPort(client))
	return err
}
