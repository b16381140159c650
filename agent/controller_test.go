package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/novaedge/novaedge/controller/stream"
	"github.com/novaedge/novaedge/controller/stream/streamtest"
	"github.com/novaedge/novaedge/deploy/examples"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// example builds the standalone example for node-a, with each old→new
// replacement applied, as a controller would publish it.
func example(t *testing.T, replace ...string) *pb.ConfigSnapshot {
	t.Helper()
	data := string(examples.Standalone)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(data, replace[i]) {
			t.Fatalf("the standalone example has no %q to replace", replace[i])
		}
		data = strings.Replace(data, replace[i], replace[i+1], 1)
	}
	return (&FileSource{DefaultName: examples.StandaloneName, Default: []byte(data), Node: snapshot.Node{Name: "node-a"}}).Load().Snapshot
}

// Contents the tests publish.
var (
	canary18083 = []string{"port: 18082\n  healthCheck", "port: 18083\n  healthCheck"}
	canary18084 = []string{"port: 18082\n  healthCheck", "port: 18084\n  healthCheck"}
	canary18085 = []string{"port: 18082\n  healthCheck", "port: 18085\n  healthCheck"}
	// A route to a missing backend: left out by the build, with an error.
	brokenRoute = []string{"        - name: demo-tcp\n", "        - name: missing\n"}
)

// controller is an in-process controller: a stream.Server on 127.0.0.1.
type controller struct {
	srv *stream.Server
	run *streamtest.Running
}

func startController(t *testing.T, tlsCfg *streamtest.TLS, addr string) *controller {
	t.Helper()
	srv := stream.NewServer(stream.Options{})
	return &controller{srv: srv, run: streamtest.Serve(t, srv, tlsCfg.Server, addr)}
}

func (c *controller) status(node string) stream.AgentStatus {
	for _, st := range c.srv.Agents() {
		if st.Node == node {
			return st
		}
	}
	return stream.AgentStatus{}
}

// publish publishes snap for node-a and returns the version it got.
func (c *controller) publish(snap *pb.ConfigSnapshot) uint64 {
	c.srv.Publish("node-a", snap)
	return c.status("node-a").PublishedVersion
}

func controllerSource(addr string, tlsCfg *streamtest.TLS, logs *syncBuffer) *ControllerSource {
	return &ControllerSource{
		Address: addr, TLS: tlsCfg.Client, Node: "node-a", AgentVersion: "test",
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	}
}

// TestControllerApplyAndAck: the agent applies what the controller
// publishes, as it publishes it, and the controller sees the ACKs.
func TestControllerApplyAndAck(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	c := startController(t, tlsCfg, "")
	v1 := c.publish(example(t))
	h := startAgent(t, controllerSource(c.run.Addr, tlsCfg, &syncBuffer{}), filepath.Join(t.TempDir(), "state"))
	a := h.agent

	if s := a.State(); s.Snapshot.GetVersion() != v1 || s.Snapshot.GetContentHash() != example(t).GetContentHash() {
		t.Fatalf("state version %d hash %s; want the published version %d", s.Snapshot.GetVersion(), s.Snapshot.GetContentHash(), v1)
	}
	waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v1 })

	v2 := c.publish(example(t, canary18083...))
	waitFor(t, "version 2 to be applied", func() bool { return a.State().Snapshot.GetVersion() == v2 })
	waitFor(t, "the second ACK", func() bool { return c.status("node-a").AppliedVersion == v2 })
	st := c.status("node-a")
	if !st.InSync || !st.Connected || st.AgentVersion != "test" || st.AppliedHash != a.State().Snapshot.GetContentHash() {
		t.Fatalf("controller's view of the agent: %+v", st)
	}
	if got := h.rec.versions(); len(got) != 2 || got[0] != v1 || got[1] != v2 {
		t.Fatalf("applier saw versions %v, want [%d %d]", got, v1, v2)
	}
	if !strings.Contains(h.logs.String(), "reason=\"snapshot from the controller\"") {
		t.Errorf("the reload's reason does not name the controller:\n%s", h.logs.String())
	}
}

// TestControllerNack: a snapshot an applier cannot compile is NACKed with
// its error while the last good one keeps serving; one whose diagnostics
// have errors is applied (the controller left the bad resource out and
// reported it in its status: it must not stop every update); a good one
// after them is applied.
func TestControllerNack(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	c := startController(t, tlsCfg, "")
	v1 := c.publish(example(t))
	h := startAgent(t, controllerSource(c.run.Addr, tlsCfg, &syncBuffer{}), filepath.Join(t.TempDir(), "state"))
	a := h.agent
	waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v1 })
	first := v1

	t.Run("diagnostics with errors are applied", func(t *testing.T) {
		bad := example(t, brokenRoute...)
		if len(bad.GetDiagnostics()) == 0 {
			t.Fatal("the broken example has no diagnostics")
		}
		v := c.publish(bad)
		waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v })
		st := c.status("node-a")
		if a.State().Snapshot.GetVersion() != v || st.NackVersion != 0 || a.Rejected() != nil {
			t.Fatalf("serving %d (want %d), NACK %d %q, rejection %v", a.State().Snapshot.GetVersion(), v, st.NackVersion, st.NackError, a.Rejected())
		}
		if len(a.State().Diagnostics.Errors()) == 0 {
			t.Fatal("the snapshot's error diagnostics are not in the agent's state")
		}
		v1 = v
	})

	t.Run("compile error", func(t *testing.T) {
		h.rec.mu.Lock()
		h.rec.failCompile = errors.New("no room in the VIP table")
		h.rec.mu.Unlock()
		v := c.publish(example(t, canary18083...))
		waitFor(t, "the NACK", func() bool { return c.status("node-a").NackVersion == v })
		if st := c.status("node-a"); !strings.Contains(st.NackError, "compile recorder: no room in the VIP table") {
			t.Fatalf("NACK error %q", st.NackError)
		}
		if got := a.State().Snapshot.GetVersion(); got != v1 {
			t.Fatalf("serving %d after a compile error, want %d", got, v1)
		}
	})

	h.rec.mu.Lock()
	h.rec.failCompile = nil
	h.rec.mu.Unlock()
	v := c.publish(example(t, canary18084...))
	waitFor(t, "the good snapshot to be applied", func() bool { return a.State().Snapshot.GetVersion() == v })
	waitFor(t, "its ACK", func() bool { return c.status("node-a").AppliedVersion == v })
	if got := h.rec.versions(); !slices.Equal(got, []uint64{first, v1, v}) {
		t.Fatalf("applier saw versions %v, want [%d %d %d]: a rejected snapshot was half-applied", got, first, v1, v)
	}
}

// TestControllerReconnect: the controller goes away and a new one (a new
// process, its counter back at the start) comes back on the same address;
// the agent reconnects and applies its snapshot under a higher version.
func TestControllerReconnect(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	c := startController(t, tlsCfg, "")
	for i := range 3 {
		c.publish(example(t, "port: 18082\n  healthCheck", fmt.Sprintf("port: %d\n  healthCheck", 18090+i)))
	}
	v1 := c.publish(example(t))
	logs := &syncBuffer{}
	h := startAgent(t, controllerSource(c.run.Addr, tlsCfg, logs), filepath.Join(t.TempDir(), "state"))
	a := h.agent
	waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v1 })

	if err := c.run.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to notice", func() bool { return strings.Contains(logs.String(), "no stream to the controller; reconnecting") })

	// The new controller has its snapshot before the agent can reach it.
	c2 := &controller{srv: stream.NewServer(stream.Options{})}
	if v := c2.publish(example(t, canary18083...)); v >= v1 {
		t.Fatalf("the new controller's first version %d is not behind %d; the test proves nothing", v, v1)
	}
	c2.run = streamtest.Serve(t, c2.srv, tlsCfg.Server, c.run.Addr)
	want := example(t, canary18083...).GetContentHash()
	waitFor(t, "the new controller's snapshot", func() bool { return a.State().Snapshot.GetContentHash() == want })
	if got := a.State().Snapshot.GetVersion(); got <= v1 {
		t.Fatalf("applied version %d, want above %d", got, v1)
	}
	waitFor(t, "the ACK to the new controller", func() bool {
		return c2.status("node-a").AppliedVersion == a.State().Snapshot.GetVersion()
	})
	if a.Rejected() != nil {
		t.Fatalf("rejection after the reconnect: %v", a.Rejected().Err)
	}
}

// TestControllerDownAtStart: an agent that starts while the controller is
// unreachable serves the snapshot cached in its state directory, says why,
// and applies the controller's snapshot once it is back.
func TestControllerDownAtStart(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	state := filepath.Join(t.TempDir(), "state")
	c := startController(t, tlsCfg, "")
	addr := c.run.Addr
	v1 := c.publish(example(t))
	h := startAgent(t, controllerSource(addr, tlsCfg, &syncBuffer{}), state)
	waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v1 })
	h.stop()
	if err := c.run.Stop(); err != nil {
		t.Fatal(err)
	}

	src := controllerSource(addr, tlsCfg, &syncBuffer{})
	src.FirstSnapshotWait = 200 * time.Millisecond
	h = startAgent(t, src, state)
	s := h.agent.State()
	if !s.Restored || s.Snapshot.GetVersion() != v1 || s.Snapshot.GetContentHash() != example(t).GetContentHash() {
		t.Fatalf("state = %+v; want version %d restored from the cache", s, v1)
	}
	r := h.agent.Rejected()
	if r == nil || !strings.Contains(r.Err.Error(), "serving the last good configuration") ||
		!strings.Contains(r.Err.Error(), "controller "+addr+" unreachable: ") {
		t.Fatalf("rejection = %+v", r)
	}
	if got := h.rec.versions(); len(got) != 1 || got[0] != v1 {
		t.Fatalf("applier saw %v, want the cached version %d", got, v1)
	}

	c2 := startController(t, tlsCfg, addr)
	c2.publish(example(t, canary18083...))
	want := example(t, canary18083...).GetContentHash()
	waitFor(t, "the controller's snapshot", func() bool { return h.agent.State().Snapshot.GetContentHash() == want })
	if s := h.agent.State(); s.Restored || s.Snapshot.GetVersion() <= v1 || h.agent.Rejected() != nil {
		t.Fatalf("after the controller came back: %+v, rejected %v", s, h.agent.Rejected())
	}
}

// stubController is a SnapshotService that runs a script, to send what a
// real server never would.
type stubController struct {
	pb.UnimplementedSnapshotServiceServer
	script func(pb.SnapshotService_StreamServer) error
}

func (s *stubController) Stream(st pb.SnapshotService_StreamServer) error { return s.script(st) }

// TestControllerOlderVersionDropped: a snapshot older than the one in
// service (an older controller replica) is dropped, not applied; the same
// version and content again is ACKed again.
func TestControllerOlderVersionDropped(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	good := example(t)
	older := example(t, canary18085...)
	older.Version = 50
	good.Version = 100

	type result struct {
		sub  *pb.Subscribe
		acks []uint64
		err  error
	}
	results := make(chan result, 1)
	script := func(st pb.SnapshotService_StreamServer) (r result) {
		m, err := st.Recv()
		if err != nil {
			r.err = err
			return r
		}
		r.sub = m.GetSubscribe()
		// next receives until an ACK or the keepalive answer.
		next := func() *pb.AgentMessage {
			m, err := st.Recv()
			if err != nil && r.err == nil {
				r.err = err
			}
			if m.GetAck() != nil {
				r.acks = append(r.acks, m.GetAck().GetVersion())
			}
			return m
		}
		send := func(m *pb.ControllerMessage) {
			if err := st.Send(m); err != nil && r.err == nil {
				r.err = err
			}
		}
		send(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: good}})
		next() // the ACK of 100
		send(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: older}})
		send(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: good}})
		next() // the ACK of 100 again
		// The agent handles messages in order: once it answers this, it
		// has handled the older snapshot.
		send(&pb.ControllerMessage{Message: &pb.ControllerMessage_Keepalive{Keepalive: &pb.Keepalive{Sequence: 1}}})
		if m := next(); m.GetKeepalive().GetSequence() != 1 && r.err == nil {
			r.err = errors.New("the agent did not answer the keepalive")
		}
		return r
	}
	stub := &stubController{script: func(st pb.SnapshotService_StreamServer) error {
		results <- script(st)
		<-st.Context().Done()
		return nil
	}}
	g := grpc.NewServer(stream.GRPCServerOptions(tlsCfg.Server)...)
	pb.RegisterSnapshotServiceServer(g, stub)
	run := newStubListener(t, g)

	logs := &syncBuffer{}
	h := startAgent(t, controllerSource(run, tlsCfg, logs), filepath.Join(t.TempDir(), "state"))
	var r result
	select {
	case r = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("the stub controller's script did not finish")
	}
	h.stop()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.sub.GetNodeName() != "node-a" || r.sub.GetAgentVersion() != "test" {
		t.Fatalf("subscribe = %v", r.sub)
	}
	if len(r.acks) != 2 || r.acks[0] != 100 || r.acks[1] != 100 {
		t.Fatalf("ACKs %v, want [100 100]", r.acks)
	}
	if got := h.rec.versions(); len(got) != 1 || got[0] != 100 {
		t.Fatalf("applier saw %v, want [100]", got)
	}
	if h.agent.Rejected() != nil {
		t.Fatalf("the older snapshot reached the agent: %v", h.agent.Rejected().Err)
	}
	if !strings.Contains(logs.String(), "dropping a snapshot older than the one in service") {
		t.Fatalf("the drop was not logged:\n%s", logs.String())
	}
}

// TestControllerSubscribeSaysWhatRuns: after a reconnect the agent
// subscribes with the version and content it runs, so the controller does
// not send them again.
func TestControllerSubscribeSaysWhatRuns(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	c := startController(t, tlsCfg, "")
	v1 := c.publish(example(t))
	h := startAgent(t, controllerSource(c.run.Addr, tlsCfg, &syncBuffer{}), filepath.Join(t.TempDir(), "state"))
	waitFor(t, "the ACK", func() bool { return c.status("node-a").AppliedVersion == v1 })
	if err := c.run.Stop(); err != nil {
		t.Fatal(err)
	}
	// The same server (its state kept) behind a new listener.
	c.run = streamtest.Serve(t, c.srv, tlsCfg.Server, c.run.Addr)
	waitFor(t, "the reconnect", func() bool { return c.status("node-a").Connected })
	st := c.status("node-a")
	if st.AppliedVersion != v1 || !st.InSync || st.SentVersion != v1 {
		t.Fatalf("after the reconnect: %+v; want applied %d, in sync, nothing sent again", st, v1)
	}
	if got := h.rec.versions(); len(got) != 1 {
		t.Fatalf("applier saw %v", got)
	}
}

// newStubListener serves g on a free port of 127.0.0.1 until the test
// ends, and returns the address.
func newStubListener(t *testing.T, g *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// TestBackoff: the wait doubles up to the cap, each draw lies between half
// the step and the step, and a healthy stream starts again from the minimum.
func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	steps := []struct {
		healthy bool
		step    time.Duration
	}{
		{false, 100 * time.Millisecond},
		{false, 200 * time.Millisecond},
		{false, 400 * time.Millisecond},
		{false, 800 * time.Millisecond},
		{false, time.Second},
		{false, time.Second},
		{true, 100 * time.Millisecond},
		{false, 200 * time.Millisecond},
	}
	for i, s := range steps {
		t.Run(fmt.Sprintf("attempt %d", i+1), func(t *testing.T) {
			// Many draws, so a wrong bound shows whatever the jitter.
			for range 200 {
				c := b
				if w := c.wait(s.healthy); w < s.step/2 || w > s.step {
					t.Fatalf("wait %v, want within [%v, %v]", w, s.step/2, s.step)
				}
			}
			b.wait(s.healthy)
		})
	}
}

// TestControllerDownAtFirstStart: without a cache, an agent that cannot
// reach its controller serves nothing and is not ready (an empty
// configuration would withdraw everything the node served), then applies
// the controller's snapshot once it is reachable.
func TestControllerDownAtFirstStart(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	c := startController(t, tlsCfg, "")
	addr := c.run.Addr
	if err := c.run.Stop(); err != nil {
		t.Fatal(err)
	}
	src := controllerSource(addr, tlsCfg, &syncBuffer{})
	src.FirstSnapshotWait = 200 * time.Millisecond
	h := newAgentHarness(t, src, filepath.Join(t.TempDir(), "state"))
	waitFor(t, "the rejection", func() bool { return h.agent.Rejected() != nil })
	if r := h.agent.Rejected(); !strings.Contains(r.Err.Error(), "no configuration yet: controller "+addr+" unreachable") {
		t.Fatalf("rejection = %v", r.Err)
	}
	if h.agent.Ready() || h.agent.State() != nil || len(h.rec.versions()) != 0 {
		t.Fatalf("ready=%v state=%+v applied=%v; want nothing served", h.agent.Ready(), h.agent.State(), h.rec.versions())
	}
	c2 := startController(t, tlsCfg, addr)
	v := c2.publish(example(t))
	waitFor(t, "the controller's snapshot", func() bool { return h.agent.Ready() && h.agent.State().Snapshot.GetVersion() == v })
	if h.agent.Rejected() != nil {
		t.Fatalf("rejection after the controller came back: %v", h.agent.Rejected().Err)
	}
}
