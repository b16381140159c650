package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/bfdd"
)

// Addresses of the daemon's node and of its peer (two addresses: one
// session each) on their veth.
var (
	nodeAddr = netip.MustParseAddr("10.83.0.1")
	peerC    = netip.MustParseAddr("10.83.0.2") // the "router": a C-bit session
	peerHB   = netip.MustParseAddr("10.83.0.3") // the "other node": a heartbeat
)

// Timers of every session: 5 × 100 ms, slow enough for two loaded cores.
const (
	interval = 100 * time.Millisecond
	mult     = 5
)

// startDaemon runs the binary in ns and stops it (SIGTERM) at the end.
func startDaemon(t *testing.T, ns *frr.NetNS, bin string, args ...string) (*exec.Cmd, *frr.SyncBuffer) {
	t.Helper()
	var out frr.SyncBuffer
	cmd := ns.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("novaedge-bfdd output:\n%s", out.String())
		}
	})
	return cmd, &out
}

// peer is a plain BFD speaker in its own namespace, recording what its
// sessions went through.
type peer struct {
	ns  *frr.NetNS
	sp  *bfd.Speaker
	mu  sync.Mutex
	evs []bfd.StateChange
}

func newPeer(t *testing.T, ns *frr.NetNS) *peer {
	p := &peer{ns: ns}
	ns.Do(t, func() error {
		sp, err := bfd.NewSpeaker(bfd.Options{ListenAddrs: []netip.Addr{netip.IPv4Unspecified()}})
		if err != nil {
			return err
		}
		p.sp = sp
		for _, local := range []netip.Addr{peerC, peerHB} {
			if _, err := sp.AddSession(bfd.SessionConfig{Peer: nodeAddr, Local: local, DetectMultiplier: mult,
				DesiredMinTx: interval, RequiredMinRx: interval}); err != nil {
				return err
			}
		}
		return nil
	})
	ch, stop := p.sp.Subscribe()
	go func() {
		for ev := range ch {
			p.mu.Lock()
			p.evs = append(p.evs, ev)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { stop(); _ = p.sp.Close() })
	return p
}

func (p *peer) state(t *testing.T, local netip.Addr) bfd.SessionState {
	t.Helper()
	st, ok := p.sp.Session(bfd.SessionKey{Peer: nodeAddr, Local: local})
	if !ok {
		t.Fatalf("peer has no session from %s", local)
	}
	return st
}

// downs returns the peer's session's transitions away from Up.
func (p *peer) downs(local netip.Addr) []bfd.StateChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bfd.StateChange
	for _, ev := range p.evs {
		if ev.Local == local && ev.From == bfd.StateUp {
			out = append(out, ev)
		}
	}
	return out
}

func session(peerAddr netip.Addr, cpi bool) bfd.SessionConfig {
	return bfd.SessionConfig{Peer: peerAddr, Local: nodeAddr, DetectMultiplier: mult, DesiredMinTx: interval,
		RequiredMinRx: interval, ControlPlaneIndependent: cpi}
}

func dial(t *testing.T, sock, name string) *bfdd.Client {
	t.Helper()
	c, err := bfdd.Dial(bfdd.ClientOptions{Socket: sock, Name: name, Retry: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func add(t *testing.T, c *bfdd.Client, cfg bfd.SessionConfig) {
	t.Helper()
	if _, err := c.AddSession(cfg); err != nil {
		t.Fatalf("add %v: %v", cfg.Key(), err)
	}
}

func daemonSession(t *testing.T, c *bfdd.Client, peerAddr netip.Addr) (bfd.SessionState, bool) {
	t.Helper()
	for _, s := range c.Sessions() {
		if s.Peer == peerAddr {
			return s, true
		}
	}
	return bfd.SessionState{}, false
}

// TestDaemon runs the binary in a namespace with a BFD peer in another and
// drives it like agents do: the router's session (C bit) outlives its
// agents and is adopted unchanged, the heartbeat goes AdminDown with its
// agent, a newer agent replaces an older one, the orphan timeout and
// SIGTERM take what is left AdminDown, and bad requests are refused with
// the field named.
func TestDaemon(t *testing.T) {
	frr.RequireRoot(t)
	bin := frr.BuildCommand(t, "github.com/novaedge/novaedge/cmd/novaedge-bfdd")
	dns := frr.NewNetNS(t, "nebfdd-d")
	pns := frr.NewNetNS(t, "nebfdd-p")
	frr.Link(t, dns, "d-p", []string{nodeAddr.String() + "/24"}, pns, "p-d", []string{peerC.String() + "/24", peerHB.String() + "/24"})
	sock := filepath.Join(t.TempDir(), "bfd.sock")
	daemon, out := startDaemon(t, dns, bin, "--socket", sock, "--orphan-timeout", "5s")
	p := newPeer(t, pns)

	first := dial(t, sock, "first agent")
	add(t, first, session(peerC, true))
	add(t, first, session(peerHB, false))
	first.Ready()
	frr.Eventually(t, "both of the peer's sessions Up", func() (bool, string) {
		c, hb := p.state(t, peerC), p.state(t, peerHB)
		return c.State == bfd.StateUp && hb.State == bfd.StateUp, fmt.Sprintf("router session %v, heartbeat %v; problem %q", c.State, hb.State, first.Problem())
	})
	if st := p.state(t, peerC); !st.RemoteControlPlaneIndependent {
		t.Error("the router's session: the peer does not see the C bit")
	}
	if st := p.state(t, peerHB); st.RemoteControlPlaneIndependent {
		t.Error("the heartbeat: the peer sees the C bit, but it dies with its agent")
	}
	before, ok := daemonSession(t, first, peerC)
	if !ok || before.State != bfd.StateUp {
		t.Fatalf("daemon's router session %+v (found %v): want Up", before, ok)
	}

	t.Run("an agent that goes takes only the heartbeat down", func(t *testing.T) {
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		frr.Eventually(t, "the heartbeat goes down, by AdminDown", func() (bool, string) {
			d := p.downs(peerHB)
			return len(d) == 1 && d[0].RemoteState == bfd.StateAdminDown, fmt.Sprintf("%+v", d)
		})
		// Three detection times without an agent: a session that depended
		// on it would have been declared down by now.
		time.Sleep(3 * mult * interval)
		if d := p.downs(peerC); len(d) != 0 || p.state(t, peerC).State != bfd.StateUp {
			t.Errorf("router session went down without its agent: %+v", d)
		}
	})

	second := dial(t, sock, "second agent")
	t.Run("the next agent adopts the session unchanged", func(t *testing.T) {
		ch, stop := second.Subscribe()
		defer stop()
		// Not Ready: it does not attach, so the daemon never hears a set
		// without the session it is about to adopt.
		time.Sleep(time.Second)
		if _, ok := daemonSession(t, second, peerC); !ok || !strings.Contains(second.Problem(), "not attached yet") {
			t.Fatalf("before Ready: the daemon's session kept %v, problem %q", ok, second.Problem())
		}
		add(t, second, session(peerC, true))
		second.Ready()
		select {
		case ev := <-ch:
			if ev.Peer != peerC || ev.From != bfd.StateUp || ev.To != bfd.StateUp || !ev.At.Equal(before.LastChange) {
				t.Errorf("first event %+v: want the router session's current state Up since %v", ev, before.LastChange)
			}
		case <-time.After(frr.HangGuard):
			t.Fatal("no initial state after attaching")
		}
		now, ok := daemonSession(t, second, peerC)
		if !ok || now.LocalDiscriminator != before.LocalDiscriminator || now.Counters.Downs != 0 || now.Counters.Ups != 1 {
			t.Errorf("adopted session %+v: want discriminator %d, 1 up, 0 downs", now, before.LocalDiscriminator)
		}
		if _, ok := daemonSession(t, second, peerHB); ok {
			t.Error("the heartbeat session is still in the daemon")
		}
		if d := p.downs(peerC); len(d) != 0 {
			t.Errorf("router session flapped: %+v", d)
		}
	})

	t.Run("a newer agent replaces the older", func(t *testing.T) {
		third := dial(t, sock, "third agent")
		add(t, third, session(peerC, true))
		add(t, third, session(peerHB, false))
		third.Ready()
		frr.Eventually(t, "the second agent is told it was replaced", func() (bool, string) {
			return strings.Contains(second.Problem(), "a newer agent attached"), second.Problem()
		})
		frr.Eventually(t, "the heartbeat Up again", func() (bool, string) {
			st := p.state(t, peerHB)
			return st.State == bfd.StateUp, st.State.String()
		})
		// The replaced agent closing must not touch the newer one's
		// sessions; nor does it attach again.
		if err := second.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * mult * interval)
		if _, ok := daemonSession(t, third, peerHB); !ok || len(p.downs(peerHB)) != 1 || len(p.downs(peerC)) != 0 {
			t.Errorf("after the replaced agent closed: heartbeat in daemon %v, peer's downs %+v / %+v", ok, p.downs(peerHB), p.downs(peerC))
		}
		if third.Problem() != "" {
			t.Errorf("third agent's problem %q", third.Problem())
		}

		t.Run("bad sessions are refused by field", func(t *testing.T) {
			bad := session(netip.MustParseAddr("10.83.0.9"), true)
			bad.EchoMode = true
			if _, err := third.AddSession(bad); err == nil || !strings.Contains(err.Error(), "EchoMode") {
				t.Errorf("echo mode: %v", err)
			}
			foreign := session(netip.MustParseAddr("10.83.0.9"), true)
			foreign.Local = netip.MustParseAddr("10.83.0.99") // not on the node
			if _, err := third.AddSession(foreign); err == nil || !strings.Contains(err.Error(), "novaedge-bfdd") {
				t.Errorf("a local address the node lacks: %v", err)
			}
			if third.Problem() != "" {
				t.Errorf("a refused session stays a problem: %q", third.Problem())
			}
			if _, ok := daemonSession(t, third, peerC); !ok {
				t.Error("the router session is gone after refused additions")
			}
		})

		t.Run("orphaned sessions end after the timeout", func(t *testing.T) {
			if err := third.Close(); err != nil {
				t.Fatal(err)
			}
			frr.Eventually(t, "the router session AdminDown after the orphan timeout", func() (bool, string) {
				d := p.downs(peerC)
				return len(d) == 1 && d[0].RemoteState == bfd.StateAdminDown, fmt.Sprintf("%+v", d)
			})
			if !strings.Contains(out.String(), "no agent attached within the orphan timeout") {
				t.Errorf("daemon log lacks the orphan timeout:\n%s", out.String())
			}
		})
	})

	t.Run("a malformed set is answered with the field", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), frr.HangGuard)
		defer cancel()
		stream, err := pb.NewBFDDaemonClient(conn).Attach(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pb.BFDAttachRequest{Generation: 7, Sessions: []*pb.BFDSessionSpec{
			{Peer: "bogus", Local: nodeAddr.String()},
			{Peer: peerC.String(), Local: nodeAddr.String(), DetectMultiplier: 300},
		}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		a := resp.GetApplied()
		if a.GetGeneration() != 7 || len(a.GetErrors()) != 2 ||
			!strings.Contains(a.GetErrors()[0].GetError(), `peer "bogus"`) || !strings.Contains(a.GetErrors()[1].GetError(), "detect_multiplier 300") {
			t.Errorf("applied %v: want generation 7 and both sessions refused by field", a)
		}
	})

	t.Run("a second daemon on the socket is refused", func(t *testing.T) {
		o, err := dns.Command(bin, "--socket", sock).CombinedOutput()
		if err == nil || !strings.Contains(string(o), "another novaedge-bfdd is serving there") {
			t.Errorf("second daemon: %v: %s", err, o)
		}
		o, err = exec.Command(bin, "--socket", sock, "--orphan-timeout", "0s").CombinedOutput()
		if err == nil || !strings.Contains(string(o), "--orphan-timeout 0s: must be positive") {
			t.Errorf("bad flag: %v: %s", err, o)
		}
	})

	t.Run("SIGTERM takes the sessions AdminDown", func(t *testing.T) {
		agent := dial(t, sock, "last agent")
		add(t, agent, session(peerC, true))
		agent.Ready()
		frr.Eventually(t, "router session Up again", func() (bool, string) {
			st := p.state(t, peerC)
			return st.State == bfd.StateUp, st.State.String()
		})
		if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		frr.Eventually(t, "the router session AdminDown", func() (bool, string) {
			d := p.downs(peerC)
			return len(d) == 2 && d[1].RemoteState == bfd.StateAdminDown, fmt.Sprintf("%+v", d)
		})
		frr.Eventually(t, "the agent sees the daemon gone", func() (bool, string) {
			return strings.Contains(agent.Problem(), "novaedge-bfdd at "+sock), agent.Problem()
		})
	})
	_ = os.Remove(sock)
}
