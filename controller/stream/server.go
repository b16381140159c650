package stream

import (
	"cmp"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/util/validation"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// Defaults of the stream's own keepalive (Options).
const (
	DefaultKeepaliveInterval = 30 * time.Second
	DefaultKeepaliveTimeout  = 30 * time.Second
)

// maxSentRecords is how many versions sent to a node are remembered, to
// accept their ACKs and NACKs: an agent answers the newest ones, and older
// ones are superseded by the time it could.
const maxSentRecords = 32

// Options configure a Server.
type Options struct {
	// Logger logs streams and problems. Nil: discard.
	Logger *slog.Logger
	// Registerer receives the stream's metrics. Nil: not registered.
	Registerer prometheus.Registerer
	// Term returns the current leadership term (from the leader-election
	// Lease); it forms the high 32 bits of versions, so a new leader's
	// versions are above the old one's. Nil: 0. It must not call the
	// Server.
	Term func() uint64
	// OnSubscribe is called when an agent subscribes for node, so the
	// controller makes sure a snapshot for it is (being) published. Nil:
	// nothing is called.
	OnSubscribe func(node string)
	// OnAgentChange is called on every connect, disconnect, ACK and NACK,
	// one call at a time in the order the changes happened, for status and
	// Events. It must not block for long and must not call Publish (it may
	// call Agents). Nil: nothing is called.
	OnAgentChange func(AgentStatus)
	// KeepaliveInterval is how often the server sends each agent a
	// keepalive, and KeepaliveTimeout how long it then waits for any
	// message from the agent before it ends the stream as dead. Zero:
	// DefaultKeepaliveInterval and DefaultKeepaliveTimeout. The timeout
	// also bounds how long one snapshot may take to reach the agent.
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// Now returns the time, for status and the ACK latency. Nil: time.Now.
	Now func() time.Time
}

// Server is the SnapshotService: Publish hands it a node's snapshot, and it
// delivers the snapshot to the node's agent.
type Server struct {
	pb.UnimplementedSnapshotServiceServer

	opts    Options
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	mu sync.Mutex
	// last is the Lamport clock: the highest version stamped or reported
	// by an agent. Every new version is above it.
	last  uint64
	nodes map[string]*nodeState
	// events wait for OnAgentChange, oldest first.
	events []AgentStatus

	// deliverMu makes OnAgentChange calls one at a time, in order.
	deliverMu sync.Mutex
}

var _ pb.SnapshotServiceServer = (*Server)(nil)

// nodeState is what the server keeps for one node. Guarded by Server.mu.
type nodeState struct {
	name string
	// snap is the latest published snapshot, stamped; nil: none yet.
	snap   *pb.ConfigSnapshot
	stream *agentStream
	// sent are the versions sent to the node, oldest first.
	sent   []sentRecord
	status AgentStatus
}

type sentRecord struct {
	version uint64
	hash    string
	at      time.Time
	acked   bool
}

// agentStream is one open Stream call.
type agentStream struct {
	node string
	peer string
	// wake tells the sender there may be something to send.
	wake chan struct{}
	// heard tells the keepalive that a message from the agent arrived.
	heard chan struct{}
	ended chan struct{}

	endOnce sync.Once
	endErr  error

	// Guarded by Server.mu.
	floor       uint64 // the highest version the agent said it applied
	appliedHash string // the content the agent runs
	sentVersion uint64 // the last snapshot version sent on this stream
	pingDue     uint64 // the sequence of a keepalive to send; 0: none
}

func newAgentStream(node, peer string) *agentStream {
	return &agentStream{
		node: node, peer: peer,
		wake: make(chan struct{}, 1), heard: make(chan struct{}, 1), ended: make(chan struct{}),
	}
}

func (as *agentStream) wakeup() {
	select {
	case as.wake <- struct{}{}:
	default: // the sender looks again anyway
	}
}

// end ends the stream with err (nil: OK) the first time it is called.
func (as *agentStream) end(err error) {
	as.endOnce.Do(func() {
		as.endErr = err
		close(as.ended)
	})
}

// NewServer returns a server; Register serves it. It panics when
// o.Registerer already holds its metrics, as prometheus.MustRegister does.
func NewServer(o Options) *Server {
	s := &Server{opts: o, log: o.Logger, now: o.Now, nodes: map[string]*nodeState{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.KeepaliveInterval <= 0 {
		s.opts.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if s.opts.KeepaliveTimeout <= 0 {
		s.opts.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	s.metrics = newMetrics(o.Registerer)
	return s
}

// Register adds the SnapshotService to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterSnapshotServiceServer(g, s)
}

func (s *Server) term() uint64 {
	if s.opts.Term == nil {
		return 0
	}
	return s.opts.Term()
}

// nextVersion stamps a new version: above every version seen, and in term
// at least. Called with s.mu held.
func (s *Server) nextVersion(term uint64) uint64 {
	v := s.last + 1
	if floor := term << 32; v <= floor {
		v = floor | 1
	}
	s.last = v
	return v
}

// observe moves the clock to v, a version an agent applied, so every version
// stamped afterwards is above it. Called with s.mu held.
func (s *Server) observe(v uint64) {
	s.last = max(s.last, v)
}

// nodeLocked returns the state of name, created if needed.
func (s *Server) nodeLocked(name string) *nodeState {
	n := s.nodes[name]
	if n == nil {
		n = &nodeState{name: name, status: AgentStatus{Node: name}}
		s.nodes[name] = n
	}
	return n
}

// Publish makes snap the configuration of node and sends it to the node's
// agent, now if it is connected, else when it subscribes. The server stamps
// a copy with the next version; snap itself is not modified and must not be
// modified afterwards. snap.ContentHash must be snapshot.ContentHash(snap)
// when set (snapshot.Build sets it); empty, it is computed. A snapshot with
// the content of the node's last one changes nothing: no new version,
// nothing sent. Publish never waits for an agent.
func (s *Server) Publish(node string, snap *pb.ConfigSnapshot) {
	hash := snap.GetContentHash()
	if hash == "" {
		hash = snapshot.ContentHash(snap)
	}
	term := s.term()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodeLocked(node)
	if n.snap != nil && n.snap.GetContentHash() == hash {
		return
	}
	n.snap = stamped(snap, hash, s.nextVersion(term))
	if n.stream != nil {
		n.stream.wakeup()
	}
}

// Forget drops the snapshot published for node, and its status and metrics
// when no agent is connected for it: the node left the cluster.
func (s *Server) Forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil {
		return
	}
	n.snap = nil
	if n.stream == nil {
		delete(s.nodes, node)
		s.metrics.forget(node)
	}
}

// Agents returns the status of every node that has a snapshot or had an
// agent, sorted by node.
func (s *Server) Agents() []AgentStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AgentStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n.statusLocked())
	}
	slices.SortFunc(out, func(a, b AgentStatus) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// statusLocked returns n's status with the fields that follow from the
// latest snapshot.
func (n *nodeState) statusLocked() AgentStatus {
	st := n.status
	st.PublishedVersion = n.snap.GetVersion()
	st.InSync = n.snap != nil && st.AppliedHash == n.snap.GetContentHash()
	return st
}

// emitLocked queues n's status for OnAgentChange as change.
func (s *Server) emitLocked(n *nodeState, change Change) {
	n.status.Change = change
	if s.opts.OnAgentChange != nil {
		s.events = append(s.events, n.statusLocked())
	}
}

// deliver calls OnAgentChange for the queued events. Whoever queued an event
// calls it after releasing s.mu; one caller at a time delivers, in order.
func (s *Server) deliver() {
	if s.opts.OnAgentChange == nil {
		return
	}
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for {
		s.mu.Lock()
		if len(s.events) == 0 {
			s.mu.Unlock()
			return
		}
		ev := s.events[0]
		s.events = s.events[1:]
		s.mu.Unlock()
		s.opts.OnAgentChange(ev)
	}
}

// Stream serves one agent: its first message must subscribe for a node;
// then the server sends the node's snapshots and keepalives, and records the
// agent's answers, until either side ends the stream.
func (s *Server) Stream(st pb.SnapshotService_StreamServer) error {
	first, err := st.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	sub, err := checkSubscribe(first)
	if err != nil {
		s.log.Warn("refused a stream", "error", err)
		return err
	}
	addr := ""
	if p, ok := peer.FromContext(st.Context()); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	as := newAgentStream(sub.GetNodeName(), addr)
	s.register(as, sub)
	if s.opts.OnSubscribe != nil {
		s.opts.OnSubscribe(as.node)
	}
	// Receiving and sending run on their own, and the handler returns as
	// soon as the stream must end: a Send blocked on a stalled agent is
	// released by gRPC when the handler returns, never before.
	go s.receive(st, as)
	go s.send(st, as)
	go s.keepalive(as)
	select {
	case <-as.ended:
	case <-st.Context().Done():
		as.end(status.FromContextError(st.Context().Err()).Err())
	}
	s.unregister(as)
	return as.endErr
}

// checkSubscribe returns the subscription of an agent's first message.
func checkSubscribe(m *pb.AgentMessage) (*pb.Subscribe, error) {
	sub := m.GetSubscribe()
	if sub == nil {
		return nil, status.Errorf(codes.InvalidArgument, "subscribe: the first message must be a subscribe, not %s", messageKind(m))
	}
	name := sub.GetNodeName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "subscribe.node_name: required")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "subscribe.node_name %q: %s", name, strings.Join(errs, "; "))
	}
	return sub, nil
}

// messageKind names the kind of m for errors.
func messageKind(m *pb.AgentMessage) string {
	switch m.GetMessage().(type) {
	case *pb.AgentMessage_Subscribe:
		return "subscribe"
	case *pb.AgentMessage_Ack:
		return "ack"
	case *pb.AgentMessage_Nack:
		return "nack"
	case *pb.AgentMessage_Keepalive:
		return "keepalive"
	default:
		return "an empty message"
	}
}

// register makes as the stream of its node, ending an older one.
func (s *Server) register(as *agentStream, sub *pb.Subscribe) {
	s.mu.Lock()
	n := s.nodeLocked(as.node)
	old := n.stream
	n.stream = as
	as.floor = sub.GetAppliedVersion()
	as.appliedHash = sub.GetAppliedContentHash()
	s.observe(as.floor)
	now := s.now()
	n.status.Connected = true
	n.status.Peer = as.peer
	n.status.AgentVersion = sub.GetAgentVersion()
	n.status.ConnectedAt = now
	n.status.LastMessageAt = now
	n.status.DisconnectReason = ""
	n.status.AppliedVersion = sub.GetAppliedVersion()
	n.status.AppliedHash = sub.GetAppliedContentHash()
	n.status.AppliedAt = time.Time{}
	if sub.GetAppliedVersion() != 0 {
		n.status.AppliedAt = now
	}
	if old == nil {
		s.metrics.connected.Inc()
	}
	s.emitLocked(n, Connected)
	as.wakeup()
	s.mu.Unlock()

	if old != nil {
		s.log.Warn("a newer stream for the node replaced the open one; two agents with one node name make them replace each other",
			"node", as.node, "old_peer", old.peer, "new_peer", as.peer)
		old.end(status.Errorf(codes.Aborted, "a newer stream for node %s (from %s) replaced this one", as.node, as.peer))
	}
	s.log.Info("agent connected", "node", as.node, "peer", as.peer, "agent_version", sub.GetAgentVersion(),
		"applied_version", sub.GetAppliedVersion())
	s.deliver()
}

// unregister records the end of as, unless a newer stream replaced it.
func (s *Server) unregister(as *agentStream) {
	reason := "the agent closed the stream"
	if as.endErr != nil {
		reason = status.Convert(as.endErr).Message()
	}
	s.mu.Lock()
	n := s.nodes[as.node]
	if n == nil || n.stream != as {
		s.mu.Unlock()
		return
	}
	n.stream = nil
	n.status.Connected = false
	n.status.DisconnectedAt = s.now()
	n.status.DisconnectReason = reason
	s.metrics.connected.Dec()
	s.emitLocked(n, Disconnected)
	s.mu.Unlock()
	s.log.Info("agent disconnected", "node", as.node, "peer", as.peer, "reason", reason)
	s.deliver()
}

// receive handles the agent's messages until the stream fails.
func (s *Server) receive(st pb.SnapshotService_StreamServer, as *agentStream) {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			as.end(nil)
			return
		}
		if err != nil {
			as.end(err)
			return
		}
		select {
		case as.heard <- struct{}{}:
		default:
		}
		switch msg := m.GetMessage().(type) {
		case *pb.AgentMessage_Ack:
			s.ack(as, msg.Ack)
		case *pb.AgentMessage_Nack:
			s.nack(as, msg.Nack)
		case *pb.AgentMessage_Keepalive:
			s.touch(as)
		case *pb.AgentMessage_Subscribe:
			as.end(status.Error(codes.InvalidArgument, "subscribe: sent twice on one stream"))
			return
		default:
			// A newer agent's message this server does not know: it
			// proves the agent alive, nothing more.
			s.touch(as)
		}
	}
}

// current returns the state of as's node when as is still its stream.
// Called with s.mu held.
func (s *Server) current(as *agentStream) *nodeState {
	n := s.nodes[as.node]
	if n == nil || n.stream != as {
		return nil
	}
	return n
}

func (s *Server) touch(as *agentStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.current(as); n != nil {
		n.status.LastMessageAt = s.now()
	}
}

// sentLocked returns the record of version v sent to n, nil if none.
func (n *nodeState) sentLocked(v uint64) *sentRecord {
	for i := range n.sent {
		if n.sent[i].version == v {
			return &n.sent[i]
		}
	}
	return nil
}

func (s *Server) ack(as *agentStream, a *pb.Ack) {
	s.mu.Lock()
	n := s.current(as)
	if n == nil {
		s.mu.Unlock()
		return
	}
	now := s.now()
	n.status.LastMessageAt = now
	rec := n.sentLocked(a.GetVersion())
	if rec == nil {
		s.mu.Unlock()
		s.log.Warn("ignoring an ACK for a version never sent to the node", "node", as.node, "version", a.GetVersion())
		return
	}
	if a.GetContentHash() != rec.hash {
		s.log.Warn("the agent ACKed a version with another content hash than the one sent", "node", as.node,
			"version", a.GetVersion(), "sent_hash", rec.hash, "acked_hash", a.GetContentHash())
	}
	s.observe(a.GetVersion())
	as.floor = max(as.floor, a.GetVersion())
	if a.GetVersion() >= n.status.AppliedVersion {
		as.appliedHash = a.GetContentHash()
		n.status.AppliedVersion = a.GetVersion()
		n.status.AppliedHash = a.GetContentHash()
		n.status.AppliedAt = now
	}
	if !rec.acked {
		rec.acked = true
		s.metrics.ackDelay.Observe(now.Sub(rec.at).Seconds())
	}
	s.metrics.acks.WithLabelValues(as.node).Inc()
	s.emitLocked(n, Acked)
	s.mu.Unlock()
	s.log.Debug("agent applied a snapshot", "node", as.node, "version", a.GetVersion())
	s.deliver()
}

func (s *Server) nack(as *agentStream, nk *pb.Nack) {
	s.mu.Lock()
	n := s.current(as)
	if n == nil {
		s.mu.Unlock()
		return
	}
	now := s.now()
	n.status.LastMessageAt = now
	if n.sentLocked(nk.GetVersion()) == nil {
		s.mu.Unlock()
		s.log.Warn("ignoring a NACK for a version never sent to the node", "node", as.node, "version", nk.GetVersion())
		return
	}
	n.status.NackVersion = nk.GetVersion()
	n.status.NackError = nk.GetError()
	n.status.NackDiagnostics = nk.GetDiagnostics()
	n.status.NackAt = now
	s.metrics.nacks.WithLabelValues(as.node).Inc()
	s.emitLocked(n, Nacked)
	s.mu.Unlock()
	s.log.Warn("agent rejected a snapshot; it keeps serving its previous one", "node", as.node,
		"version", nk.GetVersion(), "error", nk.GetError())
	s.deliver()
}

// send sends what next says, whenever woken, until the stream ends.
func (s *Server) send(st pb.SnapshotService_StreamServer, as *agentStream) {
	for {
		select {
		case <-as.ended:
			return
		case <-as.wake:
		}
		for {
			m := s.next(as, s.term())
			if m == nil {
				break
			}
			if err := st.Send(m); err != nil {
				as.end(err)
				return
			}
			if snap := m.GetSnapshot(); snap != nil {
				s.metrics.sent.WithLabelValues(as.node).Inc()
				s.log.Debug("sent a snapshot", "node", as.node, "version", snap.GetVersion())
			}
		}
	}
}

// next returns the message to send on as: a keepalive that is due, else the
// node's latest snapshot if the agent has neither been sent it nor runs its
// content; nil when there is nothing to send.
func (s *Server) next(as *agentStream, term uint64) *pb.ControllerMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.current(as)
	if n == nil {
		return nil
	}
	if as.pingDue != 0 {
		seq := as.pingDue
		as.pingDue = 0
		return &pb.ControllerMessage{Message: &pb.ControllerMessage_Keepalive{Keepalive: &pb.Keepalive{Sequence: seq}}}
	}
	snap := n.snap
	if snap == nil || snap.GetContentHash() == as.appliedHash || snap.GetVersion() == as.sentVersion {
		return nil
	}
	if snap.GetVersion() <= as.floor {
		// The agent runs a version from another replica or an earlier
		// term that is not below this one: a new number keeps its
		// versions increasing.
		snap = stamped(snap, snap.GetContentHash(), s.nextVersion(term))
		n.snap = snap
	}
	as.sentVersion = snap.GetVersion()
	// Recorded before the send: the ACK may arrive before Send returns.
	now := s.now()
	n.sent = append(n.sent, sentRecord{version: snap.GetVersion(), hash: snap.GetContentHash(), at: now})
	if len(n.sent) > maxSentRecords {
		n.sent = slices.Delete(n.sent, 0, len(n.sent)-maxSentRecords)
	}
	n.status.SentVersion = snap.GetVersion()
	n.status.SentAt = now
	return &pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: snap}}
}

// keepalive sends a keepalive every interval and ends the stream when the
// agent then stays silent for the timeout.
func (s *Server) keepalive(as *agentStream) {
	tick := time.NewTicker(s.opts.KeepaliveInterval)
	defer tick.Stop()
	var seq uint64
	for {
		select {
		case <-as.ended:
			return
		case <-tick.C:
		}
		// Only what the agent sends after this keepalive counts.
		select {
		case <-as.heard:
		default:
		}
		seq++
		s.mu.Lock()
		as.pingDue = seq
		s.mu.Unlock()
		as.wakeup()
		timeout := time.NewTimer(s.opts.KeepaliveTimeout)
		select {
		case <-as.ended:
			timeout.Stop()
			return
		case <-as.heard:
			timeout.Stop()
		case <-timeout.C:
			s.log.Warn("the agent stopped answering; ending its stream", "node", as.node, "peer", as.peer,
				"timeout", s.opts.KeepaliveTimeout)
			as.end(status.Errorf(codes.Unavailable, "the agent did not answer a keepalive within %s", s.opts.KeepaliveTimeout))
			return
		}
	}
}

// stamped returns a copy of snap with hash and version. The copy shares
// snap's content: stamping a 10 000-route snapshot for each node must not
// copy every route, and nothing modifies a published snapshot's content.
func stamped(snap *pb.ConfigSnapshot, hash string, version uint64) *pb.ConfigSnapshot {
	out := &pb.ConfigSnapshot{}
	dst := out.ProtoReflect()
	snap.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	out.ContentHash = hash
	out.Version = version
	return out
}
