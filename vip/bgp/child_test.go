package bgp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/novaedge/novaedge/test/frr"
)

// A speaker's sockets open in the namespace of whatever thread GoBGP's
// goroutines run on, and the Go runtime starts new threads from a clean
// template thread, not from one a test locked into a namespace: only a
// whole process inside the namespace is reliable. Each test speaker
// therefore runs in a child process, the test binary itself started with
// `ip netns exec` and childEnv set, driven over stdin/stdout with one JSON
// request and one JSON response per line.
const childEnv = "NOVAEDGE_BGP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

type childRequest struct {
	Op      string     `json:"op"` // start, reconcile, enable, peers, routes, events, close, crash
	Options childOpts  `json:"options"`
	Desired Desired    `json:"desired"`
	Peer    netip.Addr `json:"peer"`
	Enabled bool       `json:"enabled"`
	Reason  string     `json:"reason"`
}

type childOpts struct {
	Restarting bool `json:"restarting"`
}

type childResponse struct {
	Err    string      `json:"err,omitempty"`
	Peers  []PeerState `json:"peers,omitempty"`
	Routes []Route     `json:"routes,omitempty"`
	Events []PeerEvent `json:"events,omitempty"`
}

// runChild serves requests until stdin closes (then it closes the speaker
// and exits 0) or a "crash" request, on which it exits at once without
// closing anything, as an agent killed or restarted would.
func runChild(in io.Reader, out io.Writer) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	var sp *Speaker
	var mu sync.Mutex
	var events []PeerEvent
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req childRequest
		var resp childResponse
		err := json.Unmarshal(sc.Bytes(), &req)
		if err == nil && sp == nil && req.Op != "start" {
			err = fmt.Errorf("%s before start", req.Op)
		}
		if err == nil {
			switch req.Op {
			case "start":
				sp, err = New(Options{
					ConnectRetry:    time.Second,
					GracefulRestart: GracefulRestart{Restarting: req.Options.Restarting},
					Logger:          logger,
				})
				if err == nil {
					ch, _ := sp.Subscribe()
					go func() {
						for ev := range ch {
							mu.Lock()
							events = append(events, ev)
							mu.Unlock()
						}
					}()
				}
			case "reconcile":
				err = sp.Reconcile(ctx, req.Desired)
			case "enable":
				err = sp.SetPeerEnabled(ctx, req.Peer, req.Enabled, req.Reason)
			case "peers":
				resp.Peers, err = sp.Peers(ctx)
			case "routes":
				resp.Routes = sp.Routes()
			case "events":
				mu.Lock()
				resp.Events = append([]PeerEvent(nil), events...)
				mu.Unlock()
			case "crash":
				os.Exit(3)
			default:
				err = fmt.Errorf("unknown op %q", req.Op)
			}
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			fmt.Fprintln(os.Stderr, "child: write response:", err)
			return 1
		}
	}
	if sp != nil {
		if err := sp.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "child: close:", err)
			return 1
		}
	}
	return 0
}

// childSpeaker is the test's handle on a speaker in a child process.
type childSpeaker struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	log    *syncBuffer
	exited chan struct{}
}

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

// startChild starts a speaker process in ns. t.Cleanup ends it: stdin
// closed (the speaker closes and the process exits), or killed by pid if it
// does not exit; its log is printed when the test failed.
func startChild(t *testing.T, ns *frr.NetNS, name string, opts childOpts) *childSpeaker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &childSpeaker{t: t, name: name, log: &syncBuffer{}, exited: make(chan struct{})}
	c.cmd = ns.Command(exe, "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	c.cmd.Stderr = c.log
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewScanner(stdout)
	c.out.Buffer(make([]byte, 1<<20), 1<<20)
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start speaker %s: %v", name, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(frr.HangGuard):
			t.Errorf("speaker %s did not exit after stdin closed: killed", name)
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("speaker %s log:\n%s", name, c.log.String())
		}
	})
	c.call(childRequest{Op: "start", Options: opts})
	return c
}

func (c *childSpeaker) call(req childRequest) childResponse {
	c.t.Helper()
	resp, err := c.try(req)
	if err != nil {
		c.t.Fatalf("speaker %s: %s: %v", c.name, req.Op, err)
	}
	return resp
}

func (c *childSpeaker) try(req childRequest) (childResponse, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return childResponse{}, err
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		return childResponse{}, fmt.Errorf("write request: %w", err)
	}
	if !c.out.Scan() {
		return childResponse{}, fmt.Errorf("no response (process ended: %w): %v", c.out.Err(), c.log.String())
	}
	var resp childResponse
	if err := json.Unmarshal(c.out.Bytes(), &resp); err != nil {
		return childResponse{}, fmt.Errorf("decode response %q: %w", c.out.Bytes(), err)
	}
	if resp.Err != "" {
		return resp, fmt.Errorf("%s", resp.Err)
	}
	return resp, nil
}

func (c *childSpeaker) reconcile(d Desired) {
	c.t.Helper()
	c.call(childRequest{Op: "reconcile", Desired: d})
}

func (c *childSpeaker) setPeerEnabled(peer netip.Addr, enabled bool, reason string) {
	c.t.Helper()
	c.call(childRequest{Op: "enable", Peer: peer, Enabled: enabled, Reason: reason})
}

func (c *childSpeaker) peers() []PeerState {
	c.t.Helper()
	return c.call(childRequest{Op: "peers"}).Peers
}

func (c *childSpeaker) events() []PeerEvent {
	c.t.Helper()
	return c.call(childRequest{Op: "events"}).Events
}

// crash ends the process without closing the speaker: the kernel closes
// its connections, no Cease notification is sent, as when an agent is
// killed or restarts.
func (c *childSpeaker) crash() {
	c.t.Helper()
	b, _ := json.Marshal(childRequest{Op: "crash"})
	_, _ = c.stdin.Write(append(b, '\n'))
	select {
	case <-c.exited:
	case <-time.After(frr.HangGuard):
		c.t.Fatalf("speaker %s did not exit on crash", c.name)
	}
}
