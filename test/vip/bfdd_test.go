package vip

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
)

// runBFDD runs novaedge-bfdd in ns on sock until the end of the test.
func runBFDD(t *testing.T, ns *frr.NetNS, bin, sock, name string) {
	t.Helper()
	cmd := ns.Command(bin, "--socket", sock, "--log-level", "debug")
	w := &frr.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start novaedge-bfdd %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(frr.HangGuard):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("novaedge-bfdd %s log:\n%s", name, w.String())
		}
	})
}

// frrBFDCounters is one session of FRR's show bfd peers counters json.
type frrBFDCounters struct {
	Peer        string `json:"peer"`
	SessionUp   int    `json:"session-up"`
	SessionDown int    `json:"session-down"`
}

func bfdCounters(t *testing.T, r *frr.Router, peer string) frrBFDCounters {
	t.Helper()
	var out []frrBFDCounters
	r.JSON(t, "show bfd peers counters json", &out)
	for _, c := range out {
		if c.Peer == peer {
			return c
		}
	}
	t.Fatalf("FRR has no BFD session with %s: %+v", peer, out)
	return frrBFDCounters{}
}

// TestBFDDaemonAgentRestart: each node runs novaedge-bfdd beside its agent
// (--bfd-socket), which announces a BGP VIP with BFD to FRR. Restarting an
// agent — SIGTERM as in an upgrade, SIGKILL as in a crash — leaves FRR's
// BFD session Up (the daemon keeps it, the C bit set) and FRR keeps the
// node's path through graceful restart; the restarted agent adopts the
// session and refreshes the path. A node that goes silent (its packets
// dropped, every process alive) still loses its path on BFD detection
// time expiry, the other node's path staying.
func TestBFDDaemonAgentRestart(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, foNFTables, "nftables")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bfdd"), "frr")
	bin, bfddBin := buildAgent(t), frr.BuildCommand(t, "github.com/novaedge/novaedge/cmd/novaedge-bfdd")

	router, nsA, nsB := bfdTopology(t, "nebd")
	type node struct {
		ns    *frr.NetNS
		name  string
		dir   string
		sock  string
		agent *agentProc
	}
	nodes := []*node{{ns: nsA, name: "node-a"}, {ns: nsB, name: "node-b"}}
	for _, n := range nodes {
		n.dir = t.TempDir()
		if err := os.WriteFile(filepath.Join(n.dir, "config.yaml"), []byte(bfdFailoverConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		n.sock = filepath.Join(n.dir, "bfd.sock")
		runBFDD(t, n.ns, bfddBin, n.sock, n.name)
		n.agent = runAgent(t, n.ns, bin, n.dir, n.name, n.name, "--bfd-socket", n.sock)
	}
	a := nodes[0]
	// The restarted agents run to the end of the test, not of a subtest.
	outer := t

	both := func(t *testing.T, what string) {
		t.Helper()
		frr.Eventually(t, what, func() (bool, string) {
			peers, hops := bfdPeers(t, router), vipHops(t, router, bfVIP)
			ok := peers[bfNodeA].Status == "up" && peers[bfNodeB].Status == "up" && slices.Equal(hops, []string{bfNodeA, bfNodeB}) &&
				neighborStateOf(t, router, bfNodeA) == "Established" && neighborStateOf(t, router, bfNodeB) == "Established"
			return ok, fmt.Sprintf("bfd peers %+v, next hops %v", peers, hops)
		})
	}
	both(t, "ECMP route via both nodes, both BFD sessions up, both neighbours established")

	t.Run("novaedgectl shows the daemon's sessions with the C bit", func(t *testing.T) {
		out, err := ctl(t, filepath.Join(a.dir, "agent.sock"), "bfd", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var f pb.BFDStatus
		if err := protojson.Unmarshal([]byte(out), &f); err != nil {
			t.Fatal(err)
		}
		ss := f.GetSessions()
		if f.GetSpeaker() != "novaedge-bfdd "+a.sock || f.GetProblem() != "" || len(ss) != 1 || ss[0].GetState() != "Up" || !ss[0].GetControlPlaneIndependent() {
			t.Errorf("bfd status: %s", out)
		}
	})

	for _, restart := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM (upgrade)", syscall.SIGTERM}, {"SIGKILL (crash)", syscall.SIGKILL}} {
		t.Run("agent restart by "+restart.name+" keeps the path", func(t *testing.T) {
			downs := bfdCounters(t, router, bfNodeA).SessionDown
			if err := a.agent.cmd.Process.Signal(restart.sig); err != nil {
				t.Fatal(err)
			}
			<-a.agent.exited
			frr.Eventually(t, "FRR sees node-a's BGP session go", func() (bool, string) {
				s := neighborStateOf(t, router, bfNodeA)
				return s != "Established", s
			})
			// Three BFD detection times without the agent: a session that
			// died with it would have expired, and FRR dropped the path.
			for range 6 {
				time.Sleep(500 * time.Millisecond)
				peers, hops := bfdPeers(t, router), vipHops(t, router, bfVIP)
				if peers[bfNodeA].Status != "up" || !slices.Equal(hops, []string{bfNodeA, bfNodeB}) {
					t.Fatalf("while node-a's agent is away: bfd peers %+v, next hops %v; want the session up and both paths", peers, hops)
				}
			}
			a.agent = runAgent(outer, a.ns, bin, a.dir, a.name, a.name+" after "+restart.name, "--bfd-socket", a.sock)
			both(t, "node-a's neighbour established again, both paths")
			if c := bfdCounters(t, router, bfNodeA); c.SessionDown != downs {
				t.Errorf("FRR's BFD session with node-a went down %d times during the restart", c.SessionDown-downs)
			}
		})
	}

	t.Run("a silent node loses its path on BFD detection", func(t *testing.T) {
		undo := silence(t, nsB)
		frr.Eventually(t, "node-b's BFD session down on detection time expiry, the route via node-a only", func() (bool, string) {
			peers, hops := bfdPeers(t, router), vipHops(t, router, bfVIP)
			b := peers[bfNodeB]
			ok := b.Status == "down" && b.Diagnostic == "control detection time expired" &&
				peers[bfNodeA].Status == "up" && slices.Equal(hops, []string{bfNodeA})
			return ok, fmt.Sprintf("bfd peers %+v, next hops %v", peers, hops)
		})
		undo()
		both(t, "node-b's session and path back after the silence")
	})
	if t.Failed() {
		t.Logf("FRR bfdd log:\n%s", strings.TrimSpace(router.Log("bfdd")))
	}
}

// neighborStateOf is FRR's BGP state of the neighbour at addr.
func neighborStateOf(t *testing.T, r *frr.Router, addr string) string {
	t.Helper()
	var out map[string]struct {
		State string `json:"bgpState"`
	}
	r.JSON(t, "show bgp neighbors "+addr+" json", &out)
	return out[addr].State
}
