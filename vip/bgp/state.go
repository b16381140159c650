package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// SessionState is the BGP finite state machine state of a session (RFC
// 4271 §8.2.2).
type SessionState string

// The session states.
const (
	StateIdle        SessionState = "Idle"
	StateConnect     SessionState = "Connect"
	StateActive      SessionState = "Active"
	StateOpenSent    SessionState = "OpenSent"
	StateOpenConfirm SessionState = "OpenConfirm"
	StateEstablished SessionState = "Established"
)

func sessionState(s api.PeerState_SessionState) SessionState {
	switch s {
	case api.PeerState_CONNECT:
		return StateConnect
	case api.PeerState_ACTIVE:
		return StateActive
	case api.PeerState_OPENSENT:
		return StateOpenSent
	case api.PeerState_OPENCONFIRM:
		return StateOpenConfirm
	case api.PeerState_ESTABLISHED:
		return StateEstablished
	default:
		return StateIdle
	}
}

// PeerState is the state of one configured peer.
type PeerState struct {
	Peer  Peer
	State SessionState
	// ShutDown is the reason given to SetPeerEnabled while the peer is
	// shut down; empty when it is enabled.
	ShutDown string
	// EstablishedSince is when the session came up; zero unless
	// Established.
	EstablishedSince time.Time
	// RemoteRouterID is the peer's BGP identifier, once known.
	RemoteRouterID string
	// Received and Accepted count the prefixes the peer sent, Advertised
	// those sent to it.
	Received, Accepted, Advertised uint64
	// LastError is why the session last went down or failed to open
	// (empty if it never did), as GoBGP reports it.
	LastError string
	// LastErrorAt is when LastError was recorded.
	LastErrorAt time.Time
}

// Peers returns the state of every configured peer, sorted by address.
func (s *Speaker) Peers(ctx context.Context) ([]PeerState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if !s.running {
		return nil, nil
	}
	got := map[netip.Addr]*api.Peer{}
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			got[a.Unmap()] = p
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list bgp peers: %w", err)
	}
	out := make([]PeerState, 0, len(s.peers))
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		st := PeerState{Peer: s.peers[addr], State: StateIdle, ShutDown: s.disabled[addr]}
		if p := got[addr]; p != nil {
			st.State = sessionState(p.GetState().GetSessionState())
			if st.State == StateEstablished {
				if up := p.GetTimers().GetState().GetUptime(); up != nil {
					st.EstablishedSince = up.AsTime()
				}
				st.RemoteRouterID = p.GetState().GetRouterId()
			}
			// GoBGP may list a family twice (configured and negotiated),
			// each with the same counts.
			seen := map[string]bool{}
			for _, af := range p.GetAfiSafis() {
				if f := af.GetState().GetFamily().String(); seen[f] {
					continue
				} else {
					seen[f] = true
				}
				st.Received += af.GetState().GetReceived()
				st.Accepted += af.GetState().GetAccepted()
				adv := af.GetState().GetAdvertised()
				if st.Peer.GracefulRestart && adv > 0 {
					adv-- // GoBGP counts the End-of-RIB marker it sends with graceful restart
				}
				st.Advertised += adv
			}
		}
		st.LastError, st.LastErrorAt = s.events.lastError(addr)
		out = append(out, st)
	}
	return out, nil
}

// Routes returns the announced routes, sorted by prefix.
func (s *Speaker) Routes() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Route, 0, len(s.routes))
	for _, p := range slices.SortedFunc(maps.Keys(s.routes), comparePrefix) {
		out = append(out, s.routes[p])
	}
	return out
}

// PeerEvent is a change of a session's state.
type PeerEvent struct {
	Peer     netip.Addr
	From, To SessionState
	At       time.Time
	// Reason is why a session left Established (or failed to open), when
	// GoBGP said.
	Reason string
}

// Subscribe returns a channel of every session state change from now on,
// in order, and the function that ends the subscription. Events queue
// without bound for a slow reader rather than being dropped; the channel
// closes when the subscription or the speaker ends.
func (s *Speaker) Subscribe() (<-chan PeerEvent, func()) {
	return s.events.subscribe()
}

// events tracks per-peer session states and errors, fed by GoBGP's watch
// and log, and fans state changes out to subscribers.
type events struct {
	mu     sync.Mutex
	closed bool
	state  map[netip.Addr]SessionState
	errs   map[netip.Addr]errorAt
	subs   map[*subscriber]struct{}
}

type errorAt struct {
	msg string
	at  time.Time
}

func newEvents() *events {
	return &events{state: map[netip.Addr]SessionState{}, errs: map[netip.Addr]errorAt{}, subs: map[*subscriber]struct{}{}}
}

// configured starts tracking a peer (a new peer starts Idle).
func (e *events) configured(addr netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state[addr] = StateIdle
}

// unconfigured forgets a deleted peer.
func (e *events) unconfigured(addr netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.state, addr)
	delete(e.errs, addr)
}

func (e *events) lastError(addr netip.Addr) (string, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.errs[addr]
	return v.msg, v.at
}

func (e *events) recordError(key string, msg string) {
	addr, err := netip.ParseAddr(key)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs[addr.Unmap()] = errorAt{msg, time.Now()}
}

func (e *events) onWatch(r *api.WatchEventResponse) {
	pe := r.GetPeer()
	if pe == nil || pe.GetType() != api.WatchEventResponse_PeerEvent_STATE {
		return
	}
	addr, err := netip.ParseAddr(pe.GetPeer().GetState().GetNeighborAddress())
	if err != nil {
		return
	}
	addr = addr.Unmap()
	to := sessionState(pe.GetPeer().GetState().GetSessionState())
	e.mu.Lock()
	defer e.mu.Unlock()
	from, known := e.state[addr]
	if !known || from == to {
		return
	}
	e.state[addr] = to
	ev := PeerEvent{Peer: addr, From: from, To: to, At: time.Now()}
	if from == StateEstablished || to == StateIdle || to == StateActive {
		ev.Reason = e.errs[addr].msg
	}
	for sub := range e.subs {
		sub.push(ev)
	}
}

func (e *events) subscribe() (<-chan PeerEvent, func()) {
	sub := &subscriber{ch: make(chan PeerEvent), wake: make(chan struct{}, 1), done: make(chan struct{})}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		close(sub.ch)
		return sub.ch, func() {}
	}
	e.subs[sub] = struct{}{}
	e.mu.Unlock()
	go sub.deliver()
	var once sync.Once
	return sub.ch, func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.subs, sub)
			e.mu.Unlock()
			sub.end()
		})
	}
}

func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for sub := range e.subs {
		sub.end()
	}
	clear(e.subs)
}

// subscriber queues events for one reader.
type subscriber struct {
	ch      chan PeerEvent
	wake    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	queue   []PeerEvent
	endOnce sync.Once
}

func (s *subscriber) push(ev PeerEvent) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) end() { s.endOnce.Do(func() { close(s.done) }) }

func (s *subscriber) deliver() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range q {
			select {
			case s.ch <- ev:
			case <-s.done:
				return
			}
		}
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
	}
}

// gobgpLogger adapts GoBGP's logger to slog, and takes the reasons of
// session failures from its messages, where GoBGP reports them (its API
// does not).
type gobgpLogger struct {
	log *slog.Logger
	ev  *events
}

var _ gobgplog.Logger = (*gobgpLogger)(nil)

func (l *gobgpLogger) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	if key, ok := fields["Key"].(string); ok {
		switch msg {
		case "Peer Down":
			if r, ok := fields["Reason"].(string); ok {
				l.ev.recordError(key, r)
			}
		case "failed to connect":
			if err, ok := fields["Error"].(error); ok {
				l.ev.recordError(key, "connect: "+err.Error())
			}
		}
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields))
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		attrs = append(attrs, slog.Any(k, fields[k]))
	}
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func (l *gobgpLogger) Panic(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

func (l *gobgpLogger) Fatal(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

func (l *gobgpLogger) Error(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelError, msg, fields)
}

func (l *gobgpLogger) Warn(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelWarn, msg, fields)
}

func (l *gobgpLogger) Info(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelInfo, msg, fields)
}

func (l *gobgpLogger) Debug(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelDebug, msg, fields)
}

// SetLevel is ignored: the slog handler decides what is shown.
func (l *gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel reports Debug so that GoBGP also reports failed connection
// attempts (it does so only at Debug), whose errors become
// PeerState.LastError; the slog handler still filters what is shown.
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }
