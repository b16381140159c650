package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/novaedge/novaedge/controller/stream"
	"github.com/novaedge/novaedge/controller/stream/streamtest"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// waitFor polls cond until it holds; the deadline only bounds a broken
// test, nothing is measured.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a server on 127.0.0.1 with TLS, and what tests look at.
type env struct {
	srv  *stream.Server
	run  *streamtest.Running
	tls  *streamtest.TLS
	logs *syncBuffer
	reg  *prometheus.Registry

	mu     sync.Mutex
	events []stream.AgentStatus
}

func newEnv(t *testing.T, opts stream.Options) *env {
	t.Helper()
	e := &env{tls: streamtest.NewTLS(t), logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	opts.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Registerer = e.reg
	user := opts.OnAgentChange
	opts.OnAgentChange = func(st stream.AgentStatus) {
		e.mu.Lock()
		e.events = append(e.events, st)
		e.mu.Unlock()
		if user != nil {
			user(st)
		}
	}
	e.srv = stream.NewServer(opts)
	e.run = streamtest.Serve(t, e.srv, e.tls.Server, "")
	return e
}

// wantChanges fails t unless OnAgentChange reports exactly want for node.
// A status changes under the server's lock and OnAgentChange is called after
// the lock is released, so the events may trail the status a little: it waits
// for as many events as wanted, then compares.
func (e *env) wantChanges(t *testing.T, node string, want ...stream.Change) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d agent changes for %s", len(want), node), func() bool { return len(e.changes(node)) >= len(want) })
	if got := e.changes(node); !slices.Equal(got, want) {
		t.Fatalf("agent changes for %s: %v, want %v", node, got, want)
	}
}

func (e *env) changes(node string) []stream.Change {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []stream.Change
	for _, ev := range e.events {
		if ev.Node == node {
			out = append(out, ev.Change)
		}
	}
	return out
}

func (e *env) agent(t *testing.T, node string) stream.AgentStatus {
	t.Helper()
	for _, st := range e.srv.Agents() {
		if st.Node == node {
			return st
		}
	}
	return stream.AgentStatus{}
}

// metric returns the value of a counter or gauge, with node as its label
// when not empty.
func (e *env) metric(t *testing.T, name, node string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if node != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != node) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

func dial(t *testing.T, addr string, cfg *streamtest.TLS, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(stream.DialOptions(cfg.Client), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// agent is a hand-driven agent: it subscribes, then (once started)
// receives snapshots, answers keepalives and, with autoAck, ACKs every
// snapshot.
type agent struct {
	t       *testing.T
	st      pb.SnapshotService_StreamClient
	cancel  context.CancelFunc
	sendMu  sync.Mutex
	autoAck bool

	mu         sync.Mutex
	snaps      []*pb.ConfigSnapshot
	keepalives int
	err        error
	done       chan struct{}
}

func openStream(t *testing.T, conn *grpc.ClientConn) (pb.SnapshotService_StreamClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := pb.NewSnapshotServiceClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, cancel
}

// subscribe opens a stream on conn and subscribes with sub; start begins
// receiving.
func subscribe(t *testing.T, conn *grpc.ClientConn, sub *pb.Subscribe) *agent {
	t.Helper()
	st, cancel := openStream(t, conn)
	a := &agent{t: t, st: st, cancel: cancel, done: make(chan struct{})}
	a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Subscribe{Subscribe: sub}})
	return a
}

func (a *agent) send(m *pb.AgentMessage) {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	if err := a.st.Send(m); err != nil {
		a.t.Errorf("send %v: %v", m, err)
	}
}

func (a *agent) start() *agent {
	go func() {
		defer close(a.done)
		for {
			m, err := a.st.Recv()
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
				return
			}
			switch {
			case m.GetKeepalive() != nil:
				a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Keepalive{Keepalive: &pb.Keepalive{Sequence: m.GetKeepalive().GetSequence()}}})
				a.mu.Lock()
				a.keepalives++
				a.mu.Unlock()
			case m.GetSnapshot() != nil:
				s := m.GetSnapshot()
				a.mu.Lock()
				a.snaps = append(a.snaps, s)
				a.mu.Unlock()
				if a.autoAck {
					a.ack(s)
				}
			}
		}
	}()
	return a
}

func (a *agent) ack(s *pb.ConfigSnapshot) {
	a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Ack{Ack: &pb.Ack{Version: s.GetVersion(), ContentHash: s.GetContentHash()}}})
}

func (a *agent) received() []*pb.ConfigSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.snaps)
}

func (a *agent) versions() []uint64 {
	var out []uint64
	for _, s := range a.received() {
		out = append(out, s.GetVersion())
	}
	return out
}

// waitSnapshots waits until n snapshots arrived and returns them.
func (a *agent) waitSnapshots(n int) []*pb.ConfigSnapshot {
	a.t.Helper()
	waitFor(a.t, fmt.Sprintf("%d snapshots", n), func() bool { return len(a.received()) >= n })
	return a.received()
}

// last returns the last snapshot received, nil if none.
func (a *agent) last() *pb.ConfigSnapshot {
	r := a.received()
	if len(r) == 0 {
		return nil
	}
	return r[len(r)-1]
}

func (a *agent) streamErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// content returns a small snapshot whose content is told apart by i.
func content(i int) *pb.ConfigSnapshot {
	s := &pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Backends: []*pb.Backend{{
		Name:      fmt.Sprintf("demo/b%d", i),
		Endpoints: []*pb.Endpoint{{Address: "127.0.0.1", Port: uint32(10000 + i), Weight: 1}},
	}}}}
	s.ContentHash = snapshot.ContentHash(s)
	return s
}

// bigContent is a snapshot of about 300 kB, larger than an HTTP/2 flow
// control window.
func bigContent(i int) *pb.ConfigSnapshot {
	c := &pb.ClusterConfig{}
	for r := range 2000 {
		c.Routes = append(c.Routes, &pb.Route{Name: fmt.Sprintf("demo/r%05d-%d", r, i), Hostnames: []string{fmt.Sprintf("r%d.v%d.example.test", r, i)}})
	}
	s := &pb.ConfigSnapshot{Cluster: c}
	s.ContentHash = snapshot.ContentHash(s)
	return s
}

// TestSubscribeAndPublish: an agent receives the node's snapshot on
// connect and every new version afterwards, stamped and with the content
// published; its ACKs are recorded.
func TestSubscribeAndPublish(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	e.srv.Publish("node-b", content(100))
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a", AgentVersion: "v9"})
	a.autoAck = true
	a.start()

	first := a.waitSnapshots(1)[0]
	if first.GetVersion() == 0 || first.GetContentHash() != content(1).GetContentHash() {
		t.Fatalf("first snapshot: version %d hash %s, want a version and the hash of content 1", first.GetVersion(), first.GetContentHash())
	}
	if !proto.Equal(first.GetCluster(), content(1).GetCluster()) {
		t.Fatalf("received cluster %v, want content 1", first.GetCluster())
	}
	waitFor(t, "the ACK", func() bool { return e.agent(t, "node-a").AppliedVersion == first.GetVersion() })

	e.srv.Publish("node-a", content(2))
	second := a.waitSnapshots(2)[1]
	if second.GetVersion() <= first.GetVersion() || second.GetContentHash() != content(2).GetContentHash() {
		t.Fatalf("second snapshot: version %d (first %d), hash %s", second.GetVersion(), first.GetVersion(), second.GetContentHash())
	}
	waitFor(t, "the second ACK", func() bool { return e.agent(t, "node-a").AppliedVersion == second.GetVersion() })

	st := e.agent(t, "node-a")
	if !st.Connected || !st.InSync || st.AgentVersion != "v9" || st.SentVersion != second.GetVersion() ||
		st.PublishedVersion != second.GetVersion() || !strings.HasPrefix(st.Peer, "127.0.0.1:") {
		t.Fatalf("status = %+v", st)
	}
	if other := e.agent(t, "node-b"); other.Connected || other.PublishedVersion == 0 || other.SentVersion != 0 {
		t.Fatalf("node-b status = %+v: published, never sent", other)
	}
	if got := e.metric(t, "novaedge_controller_snapshots_sent_total", "node-a"); got != 2 {
		t.Errorf("snapshots sent = %v, want 2", got)
	}
	if got := e.metric(t, "novaedge_controller_snapshot_acks_total", "node-a"); got != 2 {
		t.Errorf("acks = %v, want 2", got)
	}
	if got := e.metric(t, "novaedge_controller_snapshot_ack_seconds", ""); got != 2 {
		t.Errorf("ACK latency samples = %v, want 2", got)
	}
	if got := e.metric(t, "novaedge_controller_agents_connected", ""); got != 1 {
		t.Errorf("connected agents = %v, want 1", got)
	}

	a.cancel()
	waitFor(t, "the disconnect", func() bool { return !e.agent(t, "node-a").Connected })
	if got := e.metric(t, "novaedge_controller_agents_connected", ""); got != 0 {
		t.Errorf("connected agents after the disconnect = %v, want 0", got)
	}
	e.wantChanges(t, "node-a", stream.Connected, stream.Acked, stream.Acked, stream.Disconnected)
}

// TestOnSubscribePublishes: the controller can publish from OnSubscribe,
// and the agent receives that snapshot.
func TestOnSubscribePublishes(t *testing.T) {
	var srv *stream.Server
	var subscribed []string
	var mu sync.Mutex
	e := newEnv(t, stream.Options{OnSubscribe: func(node string) {
		mu.Lock()
		subscribed = append(subscribed, node)
		mu.Unlock()
		srv.Publish(node, content(7))
	}})
	srv = e.srv
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	if got := a.waitSnapshots(1)[0]; got.GetContentHash() != content(7).GetContentHash() {
		t.Fatalf("received %s, want content 7", got.GetContentHash())
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(subscribed, []string{"node-a"}) {
		t.Fatalf("OnSubscribe saw %v", subscribed)
	}
}

// TestIdenticalContentNotResent: publishing the content the node already
// has makes no version and sends nothing; an agent that subscribes with the
// content already applied is not sent it again.
func TestIdenticalContentNotResent(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	v1 := a.waitSnapshots(1)[0].GetVersion()

	e.srv.Publish("node-a", content(1))
	if got := e.agent(t, "node-a").PublishedVersion; got != v1 {
		t.Fatalf("identical content got version %d, want %d kept", got, v1)
	}
	e.srv.Publish("node-a", content(2))
	got := a.waitSnapshots(2)
	// The stream is ordered: a resend of content 1 would come before 2.
	if got[1].GetContentHash() != content(2).GetContentHash() || got[1].GetVersion() != v1+1 {
		t.Fatalf("second snapshot: version %d hash %s; want content 2 as version %d", got[1].GetVersion(), got[1].GetContentHash(), v1+1)
	}

	t.Run("subscribed with the content applied", func(t *testing.T) {
		b := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{
			NodeName: "node-b", AppliedVersion: 3, AppliedContentHash: content(5).GetContentHash(),
		}).start()
		e.srv.Publish("node-b", content(5))
		waitFor(t, "node-b in sync", func() bool { return e.agent(t, "node-b").InSync })
		e.srv.Publish("node-b", content(6))
		first := b.waitSnapshots(1)[0]
		if first.GetContentHash() != content(6).GetContentHash() {
			t.Fatalf("first snapshot sent to an agent that runs content 5 is %s, want content 6", first.GetContentHash())
		}
		if n := e.metric(t, "novaedge_controller_snapshots_sent_total", "node-b"); n != 1 {
			t.Fatalf("snapshots sent to node-b = %v, want 1", n)
		}
	})
}

// TestSlowAgentDelaysNobody: an agent that does not read blocks neither
// Publish nor another agent; once it reads, it gets the newest snapshot
// without every version in between.
func TestSlowAgentDelaysNobody(t *testing.T) {
	e := newEnv(t, stream.Options{})
	const n = 12
	e.srv.Publish("fast", bigContent(0))
	e.srv.Publish("slow", bigContent(0))
	fast := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "fast"}).start()
	// A fixed window (no BDP growth) that one snapshot overflows, so the
	// server's sends to this agent stall while it does not read.
	slow := subscribe(t, dial(t, e.run.Addr, e.tls, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)),
		&pb.Subscribe{NodeName: "slow"})
	waitFor(t, "the first snapshot sent to the slow agent", func() bool { return e.agent(t, "slow").SentVersion != 0 })

	published := make(chan uint64)
	go func() {
		var last uint64
		for i := 1; i <= n; i++ {
			e.srv.Publish("slow", bigContent(i))
			e.srv.Publish("fast", bigContent(i))
			last = e.agent(t, "fast").PublishedVersion
		}
		published <- last
	}()
	var lastFast uint64
	select {
	case lastFast = <-published:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish blocked behind an agent that does not read")
	}
	waitFor(t, "the fast agent to get the last version", func() bool { return fast.last().GetVersion() == lastFast })
	if got := fast.last().GetContentHash(); got != bigContent(n).GetContentHash() {
		t.Fatalf("fast agent's last content %s, want content %d", got, n)
	}

	slow.start()
	want := bigContent(n).GetContentHash()
	waitFor(t, "the slow agent to get the newest content", func() bool { return slow.last().GetContentHash() == want })
	got := slow.versions()
	if len(got) >= n || !slices.IsSorted(got) {
		t.Fatalf("slow agent received versions %v: want fewer than %d (only the newest pending is kept), increasing", got, n)
	}
}

// TestLamportVersions: a server whose clock is behind the version an agent
// runs (another replica's, or a later term's) sends it higher versions.
func TestLamportVersions(t *testing.T) {
	tests := []struct {
		name    string
		term    uint64
		applied uint64
	}{
		{"counter behind, same term", 0, 1000},
		{"counter behind, term 2", 2, 2<<32 | 900},
		{"agent ran a later term", 2, 5<<32 | 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, stream.Options{Term: func() uint64 { return tc.term }})
			e.srv.Publish("node-a", content(1))
			if v := e.agent(t, "node-a").PublishedVersion; v != tc.term<<32|1 {
				t.Fatalf("first version %#x, want term<<32|1 = %#x", v, tc.term<<32|1)
			}
			a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{
				NodeName: "node-a", AppliedVersion: tc.applied, AppliedContentHash: content(0).GetContentHash(),
			}).start()
			got := a.waitSnapshots(1)[0]
			if got.GetVersion() <= tc.applied || got.GetContentHash() != content(1).GetContentHash() {
				t.Fatalf("sent version %#x, want content 1 above the applied %#x", got.GetVersion(), tc.applied)
			}
			e.srv.Publish("node-a", content(2))
			if next := a.waitSnapshots(2)[1].GetVersion(); next <= got.GetVersion() {
				t.Fatalf("next version %#x not above %#x", next, got.GetVersion())
			}
		})
	}
}

// TestAgentMovesBetweenReplicas: two servers stand for two controller
// replicas with their own counters; an agent that moves from one to the
// other and back never receives a lower version.
func TestAgentMovesBetweenReplicas(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	term := func() uint64 { return 1 }
	srvA := stream.NewServer(stream.Options{Term: term})
	srvB := stream.NewServer(stream.Options{Term: term})
	// A is further ahead: it published more changes.
	for i := 1; i <= 5; i++ {
		srvA.Publish("node-a", content(i))
	}
	srvB.Publish("node-a", content(4))

	var versions []uint64
	// connect subscribes with what the agent applied, receives until the
	// server's content is in, ACKs all, and leaves.
	var applied *pb.ConfigSnapshot
	connect := func(srv *stream.Server, wantHash string, publish func()) {
		t.Helper()
		run := streamtest.Serve(t, srv, tlsCfg.Server, "")
		sub := &pb.Subscribe{NodeName: "node-a"}
		if applied != nil {
			sub.AppliedVersion, sub.AppliedContentHash = applied.GetVersion(), applied.GetContentHash()
		}
		a := subscribe(t, dial(t, run.Addr, tlsCfg), sub)
		a.autoAck = true
		a.start()
		if publish != nil {
			publish()
		}
		waitFor(t, "the server's content", func() bool { return a.last().GetContentHash() == wantHash })
		for _, s := range a.received() {
			versions = append(versions, s.GetVersion())
		}
		applied = a.last()
		if err := run.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	connect(srvA, content(5).GetContentHash(), nil)
	connect(srvB, content(6).GetContentHash(), func() { srvB.Publish("node-a", content(6)) })
	connect(srvA, content(7).GetContentHash(), func() { srvA.Publish("node-a", content(7)) })
	connect(srvB, content(8).GetContentHash(), func() { srvB.Publish("node-a", content(8)) })
	if len(versions) < 4 {
		t.Fatalf("versions %v: want at least one per connection", versions)
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] <= versions[i-1] {
			t.Fatalf("versions received across replicas went back: %#x", versions)
		}
	}
}

// TestNack: a NACK is recorded with its error and diagnostics; the agent
// stays out of sync.
func TestNack(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	s := a.waitSnapshots(1)[0]
	diags := []*pb.Diagnostic{{Severity: pb.Severity_SEVERITY_ERROR, Kind: "ProxyRoute", Namespace: "demo", Name: "web", Field: "spec.hostnames[0]", Message: "bad"}}
	a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Nack{Nack: &pb.Nack{
		Version: s.GetVersion(), ContentHash: s.GetContentHash(), Error: "compile slowpath: no room", Diagnostics: diags,
	}}})
	waitFor(t, "the NACK", func() bool { return e.agent(t, "node-a").NackVersion == s.GetVersion() })
	st := e.agent(t, "node-a")
	if st.NackError != "compile slowpath: no room" || len(st.NackDiagnostics) != 1 || !proto.Equal(st.NackDiagnostics[0], diags[0]) ||
		st.InSync || st.AppliedVersion != 0 || st.Change != stream.Nacked {
		t.Fatalf("status after the NACK = %+v", st)
	}
	if got := e.metric(t, "novaedge_controller_snapshot_nacks_total", "node-a"); got != 1 {
		t.Errorf("nacks = %v, want 1", got)
	}
	if !strings.Contains(e.logs.String(), "compile slowpath: no room") {
		t.Errorf("the NACK was not logged:\n%s", e.logs.String())
	}
}

// TestAnswersForUnsentVersions: ACKs and NACKs for versions never sent to
// the node are logged and change nothing.
func TestAnswersForUnsentVersions(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	s := a.waitSnapshots(1)[0]
	a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Ack{Ack: &pb.Ack{Version: s.GetVersion() + 40, ContentHash: "x"}}})
	a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Nack{Nack: &pb.Nack{Version: s.GetVersion() + 41, Error: "x"}}})
	a.ack(s) // the server handles messages in order: this one comes last
	waitFor(t, "the real ACK", func() bool { return e.agent(t, "node-a").AppliedVersion == s.GetVersion() })
	if st := e.agent(t, "node-a"); st.NackVersion != 0 || st.AppliedHash != s.GetContentHash() {
		t.Fatalf("status = %+v", st)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "ignoring an ACK for a version never sent") || !strings.Contains(logs, "ignoring a NACK for a version never sent") {
		t.Fatalf("the stray answers were not logged:\n%s", logs)
	}
	e.wantChanges(t, "node-a", stream.Connected, stream.Acked)
}

// TestInvalidFirstMessage: a stream that does not start with a valid
// subscribe ends with InvalidArgument naming the field.
func TestInvalidFirstMessage(t *testing.T) {
	e := newEnv(t, stream.Options{})
	conn := dial(t, e.run.Addr, e.tls)
	tests := []struct {
		name string
		msg  *pb.AgentMessage
		want string
	}{
		{"ack first", &pb.AgentMessage{Message: &pb.AgentMessage_Ack{Ack: &pb.Ack{Version: 1}}}, "subscribe: the first message must be a subscribe, not ack"},
		{"empty message", &pb.AgentMessage{}, "subscribe: the first message must be a subscribe, not an empty message"},
		{"no node name", &pb.AgentMessage{Message: &pb.AgentMessage_Subscribe{Subscribe: &pb.Subscribe{}}}, "subscribe.node_name: required"},
		{"bad node name", &pb.AgentMessage{Message: &pb.AgentMessage_Subscribe{Subscribe: &pb.Subscribe{NodeName: "Node_A"}}}, `subscribe.node_name "Node_A": a lowercase RFC 1123 subdomain`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := openStream(t, conn)
			if err := st.Send(tc.msg); err != nil {
				t.Fatal(err)
			}
			_, err := st.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("stream ended with %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	if got := e.srv.Agents(); len(got) != 0 {
		t.Fatalf("refused streams left status: %+v", got)
	}

	t.Run("subscribe twice", func(t *testing.T) {
		a := subscribe(t, conn, &pb.Subscribe{NodeName: "node-a"})
		a.send(&pb.AgentMessage{Message: &pb.AgentMessage_Subscribe{Subscribe: &pb.Subscribe{NodeName: "node-b"}}})
		a.start()
		<-a.done
		if err := a.streamErr(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "subscribe: sent twice") {
			t.Fatalf("stream ended with %v", err)
		}
	})
}

// TestNewerStreamWins: a second stream for a node replaces the first, which
// ends with Aborted and a message saying why.
func TestNewerStreamWins(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	old := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	old.waitSnapshots(1)
	oldPeer := e.agent(t, "node-a").Peer

	newer := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	newer.waitSnapshots(1)
	<-old.done
	if err := old.streamErr(); status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "a newer stream for node node-a") {
		t.Fatalf("the older stream ended with %v, want Aborted naming the newer stream", err)
	}
	st := e.agent(t, "node-a")
	if !st.Connected || st.Peer == oldPeer {
		t.Fatalf("status = %+v; want connected from the newer stream (not %s)", st, oldPeer)
	}
	e.srv.Publish("node-a", content(2))
	newer.waitSnapshots(2)
	if got := e.metric(t, "novaedge_controller_agents_connected", ""); got != 1 {
		t.Errorf("connected agents = %v, want 1", got)
	}
}

// TestKeepaliveEndsDeadStream: an agent that stops answering keepalives is
// disconnected and recorded so; one that answers stays.
func TestKeepaliveEndsDeadStream(t *testing.T) {
	// The interval is short so many keepalives pass; the timeout is long so
	// a busy machine does not fail the live agent.
	e := newEnv(t, stream.Options{KeepaliveInterval: 20 * time.Millisecond, KeepaliveTimeout: 3 * time.Second})
	conn := dial(t, e.run.Addr, e.tls)
	live := subscribe(t, conn, &pb.Subscribe{NodeName: "live"}).start()
	// Subscribes, then neither reads nor answers: a hung agent.
	subscribe(t, conn, &pb.Subscribe{NodeName: "dead"})
	waitFor(t, "the dead agent to connect", func() bool { return e.agent(t, "dead").Connected })
	waitFor(t, "the dead agent to be disconnected", func() bool { return !e.agent(t, "dead").Connected })
	if st := e.agent(t, "dead"); !strings.Contains(st.DisconnectReason, "did not answer a keepalive within 3s") || st.Change != stream.Disconnected {
		t.Fatalf("dead agent status = %+v", st)
	}
	waitFor(t, "the live agent to answer keepalives", func() bool {
		live.mu.Lock()
		defer live.mu.Unlock()
		return live.keepalives >= 20
	})
	if st := e.agent(t, "live"); !st.Connected || live.streamErr() != nil {
		t.Fatalf("the live agent was disconnected: %+v, %v", st, live.streamErr())
	}
	e.wantChanges(t, "dead", stream.Connected, stream.Disconnected)
}

// TestServerStopEndsStreams: stopping the gRPC server ends the streams,
// and every agent is recorded as disconnected.
func TestServerStopEndsStreams(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", content(1))
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	a.waitSnapshots(1)
	if err := e.run.Stop(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if a.streamErr() == nil || errors.Is(a.streamErr(), context.Canceled) {
		t.Fatalf("stream error %v, want one from the server", a.streamErr())
	}
	waitFor(t, "the disconnect", func() bool { return !e.agent(t, "node-a").Connected })
}

// TestForget: a forgotten node without an agent disappears; with one, only
// its snapshot goes.
func TestForget(t *testing.T) {
	e := newEnv(t, stream.Options{})
	e.srv.Publish("gone", content(1))
	e.srv.Publish("node-a", content(1))
	subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start().waitSnapshots(1)
	e.srv.Forget("gone")
	e.srv.Forget("node-a")
	got := e.srv.Agents()
	if len(got) != 1 || got[0].Node != "node-a" || got[0].PublishedVersion != 0 || !got[0].Connected {
		t.Fatalf("Agents() = %+v", got)
	}
}
