package bfd

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/vip/bfd/internal/sockopt"
	"github.com/novaedge/novaedge/vip/internal/eventq"
)

// Options configure a [Speaker].
type Options struct {
	// Logger receives state changes (Info) and discarded packets (Debug).
	// Nil discards.
	Logger *slog.Logger
	// Clock drives the state machines. Nil means the system clock.
	Clock Clock
	// ListenAddrs are the addresses to receive control packets on, at
	// port 3784. Empty means 0.0.0.0 and :: (IPv6 left out, with a warning,
	// where the host has it disabled). A session's Local address must be
	// covered by one of them.
	ListenAddrs []netip.Addr
	// Port is the UDP port control packets are received on and sent to.
	// Zero means Port (3784, RFC 5881); another one suits sessions between
	// speakers that agree on it and must not meet other BFD speakers (the
	// agents' L2 heartbeats).
	Port uint16
}

// Speaker runs single-hop asynchronous BFD sessions (RFC 5880, RFC 5881).
// It holds the node's listeners on UDP port 3784, so a network namespace
// holds one Speaker and no other BFD implementation (FRR's bfdd among them).
// All methods are safe for concurrent use.
type Speaker struct {
	log   *slog.Logger
	clock Clock
	port  uint16
	// jitter is the random source of transmission jitter.
	jitter func() float64

	listeners []*listener
	ports     portSet

	ops      chan func()
	rx       chan rxPacket
	quit     chan struct{}
	loopDone chan struct{}
	readers  sync.WaitGroup
	stop     sync.Once

	received, droppedTTL, droppedMalformed, droppedAuth, droppedNoSession atomic.Uint64

	// Owned by the loop goroutine.
	sessions map[SessionKey]*session
	draining map[SessionKey]*session
	byDiscr  map[uint32]*session
	subs     map[*eventq.Queue[StateChange]]struct{}
	timer    Timer
}

// session is the loop's record of one session.
type session struct {
	cfg        SessionConfig
	m          *machine
	conn       *net.UDPConn
	port       uint16
	dst        netip.AddrPort
	ifindex    int
	lastChange time.Time
	ups, downs uint64
	sendErrors uint64
	buf        []byte
	// drainUntil is when a removed session stops announcing AdminDown.
	drainUntil time.Time
}

type rxPacket struct {
	pkt ControlPacket
	received
}

// NewSpeaker opens the listeners and starts the speaker. The sockets are
// created in the network namespace of the calling thread.
func NewSpeaker(opts Options) (*Speaker, error) {
	s := &Speaker{
		log:      opts.Logger,
		clock:    opts.Clock,
		port:     cmp.Or(opts.Port, Port),
		jitter:   rand.Float64,
		ops:      make(chan func()),
		rx:       make(chan rxPacket, 64),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		sessions: make(map[SessionKey]*session),
		draining: make(map[SessionKey]*session),
		byDiscr:  make(map[uint32]*session),
		subs:     make(map[*eventq.Queue[StateChange]]struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = systemClock{}
	}
	addrs := opts.ListenAddrs
	optionalV6 := len(addrs) == 0
	if len(addrs) == 0 {
		addrs = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	}
	for _, a := range addrs {
		a = a.Unmap()
		l, err := listen(a, s.port)
		if err != nil && optionalV6 && a.Is6() && sockopt.IsFamilyUnsupported(err) {
			s.log.Warn("bfd: IPv6 unavailable, only IPv4 sessions possible", "error", err)
			continue
		}
		if err != nil {
			for _, l := range s.listeners {
				_ = l.conn.Close()
			}
			if sockopt.IsAddrInUse(err) {
				return nil, fmt.Errorf("listen on %v port %d: taken by another BFD speaker (FRR's bfdd?); run one per network namespace: %w", a, s.port, err)
			}
			return nil, fmt.Errorf("listen on %v port %d: %w", a, s.port, err)
		}
		s.listeners = append(s.listeners, l)
	}
	s.timer = s.clock.NewTimer(time.Hour)
	s.timer.Stop()
	for _, l := range s.listeners {
		s.readers.Add(1)
		go s.read(l)
	}
	go s.run()
	return s, nil
}

// Close takes every session administratively down, sending each peer one
// AdminDown packet (which RFC 5882 §3.2 tells it not to treat as a failure),
// closes all sockets and ends all subscriptions. A speaker that dies
// instead sends nothing: its peers declare it down after the detection time.
func (s *Speaker) Close() error {
	s.stop.Do(func() { close(s.quit) })
	<-s.loopDone
	for _, l := range s.listeners {
		_ = l.conn.Close()
	}
	s.readers.Wait()
	return nil
}

// do runs f on the loop goroutine and waits for it.
func (s *Speaker) do(f func()) error {
	done := make(chan struct{})
	select {
	case s.ops <- func() { f(); close(done) }:
	case <-s.loopDone:
		return ErrClosed
	}
	<-done
	return nil
}

// AddSession starts a session; it reports state changes to subscribers from
// its first transition on. The session's socket is created in the network
// namespace of the calling thread. Bad configuration fails with an error
// wrapping ErrInvalidConfig that names the field.
func (s *Speaker) AddSession(cfg SessionConfig) (SessionKey, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return SessionKey{}, err
	}
	key := cfg.key()
	select {
	case <-s.loopDone:
		return key, ErrClosed
	default:
	}
	if !slices.ContainsFunc(s.listeners, func(l *listener) bool { return l.covers(cfg.Local) }) {
		return key, fmt.Errorf("%w: Local: %v is not covered by the speaker's listeners", ErrInvalidConfig, cfg.Local)
	}
	sess := &session{cfg: cfg, dst: netip.AddrPortFrom(cfg.Peer, s.port), buf: make([]byte, 0, controlPacketLength)}
	if cfg.Interface != "" {
		ifi, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return key, fmt.Errorf("%w: Interface: %w", ErrInvalidConfig, err)
		}
		sess.ifindex = ifi.Index
		if cfg.Peer.IsLinkLocalUnicast() {
			sess.dst = netip.AddrPortFrom(cfg.Peer.WithZone(cfg.Interface), s.port)
		}
	}
	sess.conn, sess.port, err = s.ports.openSender(cfg)
	if err != nil {
		return key, fmt.Errorf("session %v: %w", key, err)
	}
	var added bool
	err = s.do(func() {
		if _, ok := s.sessions[key]; ok {
			return
		}
		if old := s.draining[key]; old != nil {
			s.closeSession(old)
		}
		now := s.clock.Now()
		sess.m = newMachine(cfg.machineConfig(), s.newDiscriminator(), s.jitter, now)
		sess.lastChange = now
		s.sessions[key] = sess
		s.byDiscr[sess.m.localDiscr] = sess
		s.flush(sess, now)
		added = true
	})
	if err == nil && !added {
		err = fmt.Errorf("session %v: %w", key, ErrSessionExists)
	}
	if err != nil {
		_ = sess.conn.Close()
		s.ports.release(sess.port)
		return key, err
	}
	s.log.Info("bfd session added", "session", key, "detectMultiplier", cfg.DetectMultiplier,
		"desiredMinTx", cfg.DesiredMinTx, "requiredMinRx", cfg.RequiredMinRx, "controlPlaneIndependent", cfg.ControlPlaneIndependent)
	return key, nil
}

// UpdateSession changes the timers, detect multiplier or C bit of the
// session with cfg's key. Interval changes reach the peer through a Poll
// Sequence (RFC 5880 §6.5); until the peer acknowledges, a slower transmit
// rate or a shorter detection time does not take effect.
func (s *Speaker) UpdateSession(cfg SessionConfig) error {
	cfg, err := cfg.normalize()
	if err != nil {
		return err
	}
	key := cfg.key()
	err = ErrNoSession
	if derr := s.do(func() {
		sess := s.sessions[key]
		if sess == nil {
			return
		}
		now := s.clock.Now()
		sess.cfg = cfg
		sess.m.reconfigure(cfg.machineConfig(), now)
		s.flush(sess, now)
		err = nil
	}); derr != nil {
		return derr
	}
	if err != nil {
		return fmt.Errorf("session %v: %w", key, err)
	}
	return nil
}

// RemoveSession takes the session administratively down and forgets it.
// When a peer was known, the session goes on sending AdminDown packets for
// one detection time of the peer's, as RFC 5880 §6.8.16 asks, so that the
// peer learns the session was taken down rather than lost.
func (s *Speaker) RemoveSession(key SessionKey) error {
	found := false
	if err := s.do(func() {
		sess := s.sessions[key]
		if sess == nil {
			return
		}
		found = true
		delete(s.sessions, key)
		now := s.clock.Now()
		s.note(sess, sess.m.adminDown(), now)
		s.flush(sess, now)
		if sess.m.remoteDiscr == 0 {
			s.closeSession(sess)
			return
		}
		sess.drainUntil = now.Add(time.Duration(sess.cfg.DetectMultiplier) * sess.m.txInterval())
		s.draining[key] = sess
	}); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("session %v: %w", key, ErrNoSession)
	}
	s.log.Info("bfd session removed", "session", key)
	return nil
}

// Session returns the state of the session with key.
func (s *Speaker) Session(key SessionKey) (SessionState, bool) {
	var st SessionState
	var ok bool
	_ = s.do(func() {
		if sess := s.sessions[key]; sess != nil {
			st, ok = s.snapshot(sess), true
		}
	})
	return st, ok
}

// Sessions returns the state of every session, sorted by peer, local
// address and interface.
func (s *Speaker) Sessions() []SessionState {
	var out []SessionState
	_ = s.do(func() {
		for _, sess := range s.sessions {
			out = append(out, s.snapshot(sess))
		}
	})
	sortStates(out)
	return out
}

// Stats returns the speaker's packet counters.
func (s *Speaker) Stats() Stats {
	return Stats{
		Received:         s.received.Load(),
		DroppedTTL:       s.droppedTTL.Load(),
		DroppedMalformed: s.droppedMalformed.Load(),
		DroppedAuth:      s.droppedAuth.Load(),
		DroppedNoSession: s.droppedNoSession.Load(),
	}
}

// Subscribe returns a channel of every state change from now on, in order,
// and a function that ends the subscription and closes the channel. Events
// queue without bound while the reader is slow, so that the speaker never
// waits for a subscriber and no transition is lost; a subscriber must keep
// reading or cancel. The channel is closed when the speaker closes.
func (s *Speaker) Subscribe() (<-chan StateChange, func()) {
	sub := eventq.New[StateChange]()
	if err := s.do(func() { s.subs[sub] = struct{}{} }); err != nil {
		sub.End()
		return sub.Out(), func() {}
	}
	return sub.Out(), func() {
		_ = s.do(func() { delete(s.subs, sub) })
		sub.End()
	}
}

// Watch is Subscribe together with the state of every session at the
// moment the subscription starts, taken in one step: every change after the
// returned states is on the channel, and none before them.
func (s *Speaker) Watch() ([]SessionState, <-chan StateChange, func()) {
	sub := eventq.New[StateChange]()
	var states []SessionState
	if err := s.do(func() {
		s.subs[sub] = struct{}{}
		for _, sess := range s.sessions {
			states = append(states, s.snapshot(sess))
		}
	}); err != nil {
		sub.End()
		return nil, sub.Out(), func() {}
	}
	sortStates(states)
	return states, sub.Out(), func() {
		_ = s.do(func() { delete(s.subs, sub) })
		sub.End()
	}
}

func sortStates(states []SessionState) {
	slices.SortFunc(states, func(a, b SessionState) int {
		return cmp.Or(a.Peer.Compare(b.Peer), a.Local.Compare(b.Local), cmp.Compare(a.Interface, b.Interface))
	})
}

func (s *Speaker) snapshot(sess *session) SessionState {
	m := sess.m
	st := SessionState{
		SessionKey:          sess.cfg.key(),
		State:               m.state,
		Diag:                m.localDiag,
		LocalDiscriminator:  m.localDiscr,
		RemoteDiscriminator: m.remoteDiscr,
		RemoteState:         StateDown,
		Config:              sess.cfg,
		TxInterval:          m.txInterval(),
		Polling:             m.poll,
		LastChange:          sess.lastChange,
		Counters: Counters{
			PacketsSent:     m.sent,
			PacketsReceived: m.received,
			SendErrors:      sess.sendErrors,
			Ups:             sess.ups,
			Downs:           sess.downs,
		},
	}
	if m.received > 0 {
		st.LastReceived = m.detectFrom
	}
	if m.detecting {
		st.RemoteState = m.remoteState
		st.RemoteDiag = m.remoteDiag
		st.RemoteDetectMultiplier = m.remoteDetectMult
		st.RemoteDesiredMinTx = m.remoteDesiredTx
		st.RemoteRequiredMinRx = m.remoteMinRx
		st.RemoteControlPlaneIndependent = m.remoteCPI
		st.RxInterval = m.rxInterval()
		st.DetectionTime = m.detectionTime()
	}
	return st
}

func (s *Speaker) newDiscriminator() uint32 {
	for {
		d := rand.Uint32()
		if d != 0 && s.byDiscr[d] == nil {
			return d
		}
	}
}

// read runs per listener: it reads, applies the transport and packet checks
// that need no session, and hands the rest to the loop.
func (s *Speaker) read(l *listener) {
	defer s.readers.Done()
	buf := make([]byte, 512)
	for {
		n, r, err := l.read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("bfd: read failed", "listener", l.addr, "error", err)
			continue
		}
		s.received.Add(1)
		if r.ttl != sockopt.MaxTTL {
			s.droppedTTL.Add(1)
			s.log.Debug("bfd: packet discarded: ttl is not 255", "from", r.src, "ttl", r.ttl)
			continue
		}
		p := rxPacket{received: r}
		if err := p.pkt.UnmarshalBinary(buf[:n]); err != nil {
			if errors.Is(err, ErrAuthNotSupported) {
				s.droppedAuth.Add(1)
			} else {
				s.droppedMalformed.Add(1)
			}
			s.log.Debug("bfd: packet discarded", "from", r.src, "error", err)
			continue
		}
		select {
		case s.rx <- p:
		case <-s.quit:
			return
		}
	}
}

// run is the loop: it owns all session state, so that API calls, packets
// and timers are applied one at a time.
func (s *Speaker) run() {
	defer close(s.loopDone)
	for {
		s.arm()
		select {
		case <-s.quit:
			s.shutdown()
			return
		case op := <-s.ops:
			op()
		case p := <-s.rx:
			s.handlePacket(&p)
		case <-s.timer.C():
			s.handleTimers()
		}
	}
}

// arm sets the timer to the earliest deadline of any session.
func (s *Speaker) arm() {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	for _, sess := range s.sessions {
		if t, ok := sess.m.deadline(); ok {
			consider(t)
		}
	}
	for _, sess := range s.draining {
		consider(sess.drainUntil)
		if t, ok := sess.m.deadline(); ok {
			consider(t)
		}
	}
	s.timer.Stop()
	if found {
		s.timer.ResetAt(next)
	}
}

func (s *Speaker) handleTimers() {
	now := s.clock.Now()
	for _, sess := range s.sessions {
		s.note(sess, sess.m.expire(now), now)
		s.flush(sess, now)
	}
	for _, sess := range s.draining {
		if !now.Before(sess.drainUntil) {
			s.closeSession(sess)
			continue
		}
		s.flush(sess, now)
	}
}

// handlePacket selects the session of a packet (RFC 5881 §3: by Your
// Discriminator, or by addresses and interface while it is zero) and runs
// it through the session's state machine. A packet must come from the
// session's peer, to its local address, on its interface if it has one.
func (s *Speaker) handlePacket(p *rxPacket) {
	var sess *session
	if d := p.pkt.YourDiscriminator; d != 0 {
		if c := s.byDiscr[d]; c != nil && c.accepts(&p.received) {
			sess = c
		}
	} else {
		for _, c := range s.sessions {
			if c.accepts(&p.received) {
				sess = c
				break
			}
		}
	}
	if sess == nil {
		s.droppedNoSession.Add(1)
		s.log.Debug("bfd: packet discarded: no session", "from", p.src, "to", p.dst, "ifindex", p.ifindex,
			"yourDiscriminator", p.pkt.YourDiscriminator)
		return
	}
	now := s.clock.Now()
	s.note(sess, sess.m.receive(&p.pkt, now), now)
	s.flush(sess, now)
}

func (sess *session) accepts(r *received) bool {
	return r.src == sess.cfg.Peer && r.dst == sess.cfg.Local && (sess.ifindex == 0 || sess.ifindex == r.ifindex)
}

// note records a transition and tells the subscribers.
func (s *Speaker) note(sess *session, tr transition, now time.Time) {
	if !tr.changed() {
		return
	}
	sess.lastChange = now
	if tr.to == StateUp {
		sess.ups++
	}
	if tr.from == StateUp {
		sess.downs++
	}
	ev := StateChange{
		SessionKey:  sess.cfg.key(),
		From:        tr.from,
		To:          tr.to,
		Diag:        tr.diag,
		RemoteState: sess.m.remoteState,
		RemoteDiag:  sess.m.remoteDiag,
		At:          now,
	}
	s.log.Info("bfd session state changed", "session", ev.SessionKey, "from", ev.From, "to", ev.To,
		"diag", ev.Diag, "remoteDiag", ev.RemoteDiag)
	for sub := range s.subs {
		sub.Push(ev)
	}
}

// flush sends what the session's state machine wants sent now.
func (s *Speaker) flush(sess *session, now time.Time) {
	p, ok := sess.m.transmit(now)
	if !ok {
		return
	}
	b, err := p.AppendBinary(sess.buf[:0])
	if err == nil {
		_, err = sess.conn.WriteToUDPAddrPort(b, sess.dst)
	}
	if err != nil {
		sess.sendErrors++
		s.log.Debug("bfd: send failed", "session", sess.cfg.key(), "error", err)
	}
}

func (s *Speaker) closeSession(sess *session) {
	key := sess.cfg.key()
	if s.draining[key] == sess {
		delete(s.draining, key)
	}
	if s.sessions[key] == sess {
		delete(s.sessions, key)
	}
	delete(s.byDiscr, sess.m.localDiscr)
	_ = sess.conn.Close()
	s.ports.release(sess.port)
}

// shutdown runs on the loop when the speaker closes.
func (s *Speaker) shutdown() {
	s.timer.Stop()
	now := s.clock.Now()
	for _, sess := range s.sessions {
		s.note(sess, sess.m.adminDown(), now)
		s.flush(sess, now)
		s.closeSession(sess)
	}
	for _, sess := range s.draining {
		s.closeSession(sess)
	}
	for sub := range s.subs {
		sub.End()
	}
}
