package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// nsDialer dials from inside a network namespace: one goroutine, locked to
// its thread, enters the namespace and creates every socket there.
type nsDialer struct {
	reqs chan dialReq
}

type dialReq struct {
	addr  string
	reply chan dialResult
}

type dialResult struct {
	c   net.Conn
	err error
}

func newNSDialer(t *testing.T, ns string) *nsDialer {
	t.Helper()
	h, err := vnetns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	d := &nsDialer{reqs: make(chan dialReq)}
	ready := make(chan error, 1)
	go func() {
		// The thread stays in the namespace and dies with the goroutine
		// (it is never unlocked), so no other goroutine runs there.
		runtime.LockOSThread()
		if err := vnetns.Set(h); err != nil {
			ready <- err
			return
		}
		_ = h.Close()
		ready <- nil
		for r := range d.reqs {
			c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
			r.reply <- dialResult{c, err}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(d.reqs) })
	return d
}

func (d *nsDialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	r := dialReq{addr: addr, reply: make(chan dialResult, 1)}
	select {
	case d.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-r.reply
	return res.c, res.err
}

// TestUpgradeWithoutRefusedConnections replaces a running agent by a new
// process while clients send requests through the VIP with a new
// connection each: the new agent takes the listening sockets over the
// handoff socket, the old one drains and exits, and no request fails.
func TestUpgradeWithoutRefusedConnections(t *testing.T) {
	ns := netns(t)
	startDemoBackend(t, ns, "127.0.0.1:18081", "web-1")
	startDemoBackend(t, ns, "127.0.0.1:18082", "web-2")
	dir := t.TempDir()
	old := startAgentIn(t, ns, dir, true)

	d := newNSDialer(t, ns)
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		ok, failed atomic.Int64
		firstErr   atomic.Value
		wg         sync.WaitGroup
	)
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	for range 3 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := client.Get("http://127.0.10.1:8080/")
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello from web-") {
						err = fmt.Errorf("status %d body %q", resp.StatusCode, body)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		})
	}
	waitCount := func(what string, n int64) {
		deadline := time.Now().Add(30 * time.Second)
		for ok.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %d ok, %d failed (%v)", what, ok.Load(), failed.Load(), firstErr.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount("traffic through the old agent", 50)

	next := startAgentIn(t, ns, dir, false)
	select {
	case err := <-old.done:
		if err != nil {
			t.Fatalf("the old agent exited with %v; its log:\n%s", err, old.logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the old agent did not exit after the handoff; its log:\n%s\nthe new one's:\n%s", old.logs.String(), next.logs.String())
	}
	next.waitStatus(t, "the new agent's admin API", func(st *pb.AgentStatus) bool { return st.GetReady() })
	n := ok.Load()
	waitCount("traffic through the new agent", n+100)
	stop()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during the upgrade (first: %v)\nold agent:\n%s\nnew agent:\n%s",
			failed.Load(), ok.Load()+failed.Load(), firstErr.Load(), old.logs.String(), next.logs.String())
	}
	// The old agent has exited, its log is complete; the running one's
	// comes through a pipe.
	if !strings.Contains(old.logs.String(), "handed the listening sockets to a new agent") {
		t.Fatalf("the old agent's log does not show the handoff:\n%s", old.logs.String())
	}
	next.waitLog(t, "the takeover", "took over the running agent's listening sockets")
	t.Logf("%d requests through the upgrade, 0 failed", ok.Load())
	next.stop(t)
}

var (
	ctlOnce sync.Once
	ctlPath string
	ctlErr  error
)

// ctlBinary builds novaedgectl (its demo-backend command) next to the
// agent binary.
func ctlBinary(t *testing.T) string {
	t.Helper()
	agent := agentBinary(t)
	ctlOnce.Do(func() {
		ctlPath = filepath.Join(filepath.Dir(agent), "novaedgectl")
		if out, err := exec.Command("go", "build", "-o", ctlPath, "../novaedgectl").CombinedOutput(); err != nil {
			ctlErr = fmt.Errorf("go build novaedgectl: %w\n%s", err, out)
		}
	})
	if ctlErr != nil {
		t.Fatal(ctlErr)
	}
	return ctlPath
}
