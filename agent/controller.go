package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/novaedge/novaedge/controller/stream"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// Defaults of ControllerSource.
const (
	DefaultFirstSnapshotWait = 10 * time.Second
	DefaultMinBackoff        = 500 * time.Millisecond
	DefaultMaxBackoff        = 30 * time.Second
	DefaultHealthyAfter      = 30 * time.Second
)

// outboxSize bounds the answers waiting to be sent on one stream. The agent
// answers one snapshot at a time, so it fills only when the stream is stuck,
// and then the next subscribe says what the agent runs anyway.
const outboxSize = 64

// OutcomeReporter is implemented by sources that answer for what became of
// the configurations they offered: the controller's stream ACKs or NACKs
// each snapshot.
type OutcomeReporter interface {
	// Report is called by Agent.Run after it acted on a candidate:
	// offered is the candidate's snapshot as the source returned it from
	// Load, or the cached snapshot restored in its place at start; out is
	// the result and diags the candidate's diagnostics. Report must not
	// block.
	Report(offered *pb.ConfigSnapshot, out Outcome, diags diag.List)
}

// ControllerSource follows the controller's snapshot stream for one node.
// It connects on the first Load or Watch, keeps the stream open (reconnecting
// with exponential backoff and jitter), and offers the newest snapshot
// received; it answers each snapshot the agent acts on with an ACK or a NACK.
type ControllerSource struct {
	// Address is the controller's host:port. Required.
	Address string
	// ServerName is the name the controller's certificate must carry.
	// Empty: TLS.ServerName, else the host part of Address.
	ServerName string
	// TLS holds the CA that signed the controller's certificate and the
	// agent's client certificate. Nil: no transport security (tests only).
	TLS *tls.Config
	// Node is the node the agent subscribes for. Required.
	Node string
	// AgentVersion is reported to the controller when subscribing.
	AgentVersion string
	// Logger logs the connection and dropped snapshots. Nil: discard.
	Logger *slog.Logger
	// FirstSnapshotWait is how long the first Load waits for a snapshot
	// before it reports the controller unreachable (the agent then restores
	// the last good snapshot from its state directory). Zero:
	// DefaultFirstSnapshotWait.
	FirstSnapshotWait time.Duration
	// MinBackoff and MaxBackoff bound the wait between connection
	// attempts, which doubles after each failure. Zero: DefaultMinBackoff
	// and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HealthyAfter is how long a stream must have stayed up for the
	// backoff to start again from MinBackoff. Zero: DefaultHealthyAfter.
	HealthyAfter time.Duration

	startOnce sync.Once
	stop      context.CancelFunc
	loopDone  chan struct{}
	first     chan struct{} // closed when the first snapshot arrives
	firstOnce sync.Once

	mu sync.Mutex
	// latest is the newest snapshot received, from session latestGen.
	latest    *pb.ConfigSnapshot
	latestGen uint64
	// loaded is the snapshot the last Load returned, from session
	// loadedGen: Report answers for it.
	loaded    *pb.ConfigSnapshot
	loadedGen uint64
	waited    bool
	// serving is what the agent runs, as Report said.
	serving struct {
		version uint64
		hash    string
	}
	sess      *session // the open stream; nil: none
	gen       uint64
	connected bool
	lastErr   error
	changed   func()
}

var (
	_ Source          = (*ControllerSource)(nil)
	_ OutcomeReporter = (*ControllerSource)(nil)
)

// session is one stream to the controller.
type session struct {
	gen   uint64
	out   chan *pb.AgentMessage
	acked uint64 // the last version ACKed on it; guarded by ControllerSource.mu
}

// Kind returns "controller".
func (s *ControllerSource) Kind() string { return "controller" }

// Describe returns "controller:" and the address.
func (s *ControllerSource) Describe() []string { return []string{"controller:" + s.Address} }

// Load returns the newest snapshot received. Before the first one arrived,
// the first call waits up to FirstSnapshotWait for it; without one, Load
// returns an empty snapshot with an error saying why.
func (s *ControllerSource) Load() Candidate {
	s.start()
	s.mu.Lock()
	wait := !s.waited
	s.waited = true
	s.mu.Unlock()
	if wait {
		t := time.NewTimer(cmpOr(s.FirstSnapshotWait, DefaultFirstSnapshotWait))
		select {
		case <-s.first:
		case <-t.C:
		case <-s.loopDone:
		}
		t.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest != nil {
		s.loaded, s.loadedGen = s.latest, s.latestGen
		diags := diagsFromProto(s.latest.GetDiagnostics())
		diags.Sort()
		return Candidate{Snapshot: s.latest, Diagnostics: diags}
	}
	s.loaded = nil
	reason := "no answer yet"
	switch {
	case s.lastErr != nil:
		reason = s.lastErr.Error()
	case s.connected:
		reason = "connected, but no snapshot received yet"
	}
	return Candidate{
		Snapshot:    &pb.ConfigSnapshot{},
		Unavailable: fmt.Errorf("controller %s unreachable: %s", s.Address, reason),
	}
}

// Watch calls changed when a snapshot arrives, and once at the start, until
// ctx ends; then it closes the connection.
func (s *ControllerSource) Watch(ctx context.Context, changed func()) error {
	s.start()
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	changed()
	<-ctx.Done()
	s.mu.Lock()
	s.changed = nil
	s.mu.Unlock()
	s.Close()
	return nil
}

// Close ends the connection and waits for it to be closed. Load then
// returns the last snapshot received.
func (s *ControllerSource) Close() {
	s.startOnce.Do(func() {
		s.stop = func() {}
		s.first = make(chan struct{})
		s.loopDone = make(chan struct{})
		close(s.loopDone)
	})
	s.stop()
	<-s.loopDone
}

// Report answers the controller for a snapshot it sent: an ACK when the
// agent runs it (or its content), a NACK with the error and diagnostics when
// the agent rejected it. It also remembers what the agent runs, for the next
// subscribe.
func (s *ControllerSource) Report(offered *pb.ConfigSnapshot, out Outcome, diags diag.List) {
	hash := offered.GetContentHash()
	if hash == "" {
		hash = snapshot.ContentHash(offered)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if out.Applied && !out.Unchanged {
		s.serving.version, s.serving.hash = out.Version, hash
	}
	// Only snapshots from the open stream are answered: after a reconnect
	// the subscribe told the controller what the agent runs.
	sess := s.sess
	if offered != s.loaded || offered.GetVersion() == 0 || sess == nil || sess.gen != s.loadedGen {
		return
	}
	if out.Applied {
		if sess.acked == offered.GetVersion() {
			return // a reload of the same snapshot: answered already
		}
		sess.acked = offered.GetVersion()
		s.enqueue(sess, &pb.AgentMessage{Message: &pb.AgentMessage_Ack{Ack: &pb.Ack{Version: offered.GetVersion(), ContentHash: hash}}})
		return
	}
	lines := []string{"rejected"}
	if out.Err != nil {
		lines[0] = out.Err.Error()
	}
	for _, d := range diags.Errors() {
		lines = append(lines, d.String())
	}
	s.enqueue(sess, &pb.AgentMessage{Message: &pb.AgentMessage_Nack{Nack: &pb.Nack{
		Version: offered.GetVersion(), ContentHash: hash, Error: strings.Join(lines, "\n"), Diagnostics: diagsToProto(diags),
	}}})
}

// enqueue queues m on sess without blocking. Called with s.mu held.
func (s *ControllerSource) enqueue(sess *session, m *pb.AgentMessage) {
	select {
	case sess.out <- m:
	default:
		s.log().Warn("the controller stream is not taking messages; dropping an answer (the next subscribe says what runs)")
	}
}

func (s *ControllerSource) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// start starts the connection loop once.
func (s *ControllerSource) start() {
	s.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		s.first = make(chan struct{})
		s.loopDone = make(chan struct{})
		go s.run(ctx)
	})
}

// run keeps a stream open until ctx ends.
func (s *ControllerSource) run(ctx context.Context) {
	defer close(s.loopDone)
	b := backoff{min: cmpOr(s.MinBackoff, DefaultMinBackoff), max: cmpOr(s.MaxBackoff, DefaultMaxBackoff)}
	var lastMsg string
	for {
		began := time.Now()
		established, err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the controller ended the stream")
		}
		wait := b.wait(established && time.Since(began) >= cmpOr(s.HealthyAfter, DefaultHealthyAfter))
		s.mu.Lock()
		s.lastErr = err
		s.connected = false
		s.mu.Unlock()
		if msg := err.Error(); established || msg != lastMsg {
			s.log().Warn("no stream to the controller; reconnecting", "controller", s.Address, "error", err, "retry_in", wait.Round(time.Millisecond))
			lastMsg = msg
		} else {
			s.log().Debug("no stream to the controller; reconnecting", "controller", s.Address, "error", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait between connection attempts: it doubles after each
// failure, up to max, and starts again from min after a healthy stream.
type backoff struct {
	min, max, next time.Duration
}

// wait returns how long to wait after an attempt; healthy says the stream
// had stayed up long enough to count as a recovery. The wait is drawn
// uniformly between half the step and the step: the jitter spreads the
// reconnects of a cluster's agents after a controller restart.
func (b *backoff) wait(healthy bool) time.Duration {
	if healthy || b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next = min(b.next*2, b.max)
	return d/2 + rand.N(d/2+1)
}

// tlsConfig returns TLS with the server name to verify.
func (s *ControllerSource) tlsConfig() *tls.Config {
	if s.TLS == nil {
		return nil
	}
	c := s.TLS.Clone()
	switch {
	case s.ServerName != "":
		c.ServerName = s.ServerName
	case c.ServerName == "":
		if host, _, err := net.SplitHostPort(s.Address); err == nil {
			c.ServerName = host
		}
	}
	return c
}

// session runs one stream: subscribe, then take snapshots and answer
// keepalives until it fails. established is true once the controller sent
// anything.
func (s *ControllerSource) session(ctx context.Context) (established bool, err error) {
	conn, err := grpc.NewClient(s.Address, stream.DialOptions(s.tlsConfig())...)
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", s.Address, err)
	}
	defer func() { _ = conn.Close() }()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := pb.NewSnapshotServiceClient(conn).Stream(sctx)
	if err != nil {
		return false, plain(err)
	}

	s.mu.Lock()
	s.gen++
	sess := &session{gen: s.gen, out: make(chan *pb.AgentMessage, outboxSize)}
	sub := &pb.Subscribe{NodeName: s.Node, AgentVersion: s.AgentVersion, AppliedVersion: s.serving.version, AppliedContentHash: s.serving.hash}
	s.sess = sess
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.sess == sess {
			s.sess = nil
		}
		s.mu.Unlock()
	}()

	// A failed send shows as the stream's error on Recv below.
	_ = st.Send(&pb.AgentMessage{Message: &pb.AgentMessage_Subscribe{Subscribe: sub}})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-sctx.Done():
				return
			case m := <-sess.out:
				if st.Send(m) != nil {
					return
				}
			}
		}
	}()
	defer func() {
		cancel()
		<-sent
	}()

	for {
		m, err := st.Recv()
		if err != nil {
			return established, plain(err)
		}
		if !established {
			established = true
			s.mu.Lock()
			s.connected, s.lastErr = true, nil
			s.mu.Unlock()
			s.log().Info("connected to the controller", "controller", s.Address, "node", s.Node)
		}
		switch msg := m.GetMessage().(type) {
		case *pb.ControllerMessage_Snapshot:
			s.offer(msg.Snapshot, sess)
		case *pb.ControllerMessage_Keepalive:
			s.mu.Lock()
			s.enqueue(sess, &pb.AgentMessage{Message: &pb.AgentMessage_Keepalive{Keepalive: &pb.Keepalive{Sequence: msg.Keepalive.GetSequence()}}})
			s.mu.Unlock()
		}
	}
}

// plain returns err with the gRPC status's message only: "connection
// refused" reads better in "controller … unreachable: …" than the full
// "rpc error: code = …".
func plain(err error) error {
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return err
}

// offer takes a snapshot from the stream: the newest becomes what Load
// returns, unless it is older than the snapshot in service.
func (s *ControllerSource) offer(snap *pb.ConfigSnapshot, sess *session) {
	if snap.GetContentHash() == "" {
		snap.ContentHash = snapshot.ContentHash(snap)
	}
	v, hash := snap.GetVersion(), snap.GetContentHash()
	s.mu.Lock()
	switch {
	case v == 0:
		s.mu.Unlock()
		s.log().Warn("ignoring a snapshot without a version from the controller", "controller", s.Address)
		return
	case v < s.serving.version:
		serving := s.serving.version
		s.mu.Unlock()
		s.log().Warn("dropping a snapshot older than the one in service; an older controller replica sent it",
			"controller", s.Address, "version", v, "serving", serving)
		return
	case v == s.serving.version && hash == s.serving.hash:
		// The agent runs it already: say so again.
		sess.acked = v
		s.enqueue(sess, &pb.AgentMessage{Message: &pb.AgentMessage_Ack{Ack: &pb.Ack{Version: v, ContentHash: hash}}})
		s.mu.Unlock()
		return
	}
	s.latest, s.latestGen = snap, sess.gen
	changed := s.changed
	s.mu.Unlock()
	s.firstOnce.Do(func() { close(s.first) })
	if changed != nil {
		changed()
	}
}
