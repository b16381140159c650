package vip

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/novaedge/novaedge/test/frr"
)

// nodeBFDPeer is one session of the node's own FRR bfdd.
type nodeBFDPeer struct {
	Peer   string `json:"peer"`
	Local  string `json:"local"`
	Status string `json:"status"`
}

// TestAgentUsesFRRsBFDD: where FRR's bfdd runs on the node (it holds UDP
// 3784), the agent runs its BGP peer's BFD session there instead of its
// own speaker: the session is a bfd peer in the node's FRR, Up with the
// router's bfdd, shown by novaedgectl with speaker "FRR bfdd". The agent
// follows its state: silencing the node takes it down and shuts the BGP
// peer ("BFD down"), the end of the silence brings both back. An agent
// restart leaves the session in the node's bfdd, so the router's session
// never goes down.
func TestAgentUsesFRRsBFDD(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, foNFTables, "nftables")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bfdd"), "frr")
	bin := buildAgent(t)

	rns := frr.NewNetNS(t, "nefb-r")
	nns := frr.NewNetNS(t, "nefb-n")
	frr.Link(t, rns, "r-n", []string{routerAddr + "/24"}, nns, "n-r", []string{nodeAddr + "/24"})
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "bfdd", Config: "hostname tor\n"},
		frr.Daemon{Name: "bgpd", Config: strings.Replace(frrConfig, "BFD", " neighbor "+nodeAddr+" bfd\n", 1), Args: []string{"-p", "179"}},
	)
	node := frr.Start(t, nns,
		frr.Daemon{Name: "zebra", Config: "hostname node\n"},
		frr.Daemon{Name: "bfdd", Config: "hostname node\n"},
	)
	dir := t.TempDir()
	cfg := strings.Replace(config, "BFD", bfdConfig, 1)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	start := func(name string) *agentProc {
		return runAgent(t, nns, bin, dir, "node1", name, "--frr-vty-dir", node.Dir, "--frr-vtysh", frr.VtyshCmd)
	}
	agent := start("first")

	nodeSession := func() nodeBFDPeer {
		var peers []nodeBFDPeer
		node.JSON(t, "show bfd peers json", &peers)
		for _, p := range peers {
			if p.Peer == routerAddr && p.Local == nodeAddr {
				return p
			}
		}
		return nodeBFDPeer{}
	}
	healthy := func(t *testing.T, what string) {
		t.Helper()
		frr.Eventually(t, what, func() (bool, string) {
			r, n, hops := bfdPeers(t, router)[nodeAddr], nodeSession(), fib(t, router)
			return r.Status == "up" && n.Status == "up" && slices.Equal(hops, []string{nodeAddr}) && neighborState(t, router) == "Established",
				fmt.Sprintf("router's bfd %+v, node's bfd %+v, FIB %v", r, n, hops)
		})
	}
	healthy(t, "the session Up in both bfdds, the route installed")

	t.Run("novaedgectl shows FRR's bfdd as the speaker", func(t *testing.T) {
		frr.Eventually(t, "vip status: bfd in FRR, Up", func() (bool, string) {
			st, err := vipStatus(t, sock)
			if err != nil {
				return false, err.Error()
			}
			b := st.GetBfd()
			ok := b.GetSpeaker() == "FRR bfdd" && len(b.GetSessions()) == 1 && b.GetSessions()[0].GetState() == "Up" &&
				b.GetSessions()[0].GetPeer() == routerAddr && b.GetError() == ""
			return ok, fmt.Sprintf("%v", b)
		})
	})

	t.Run("a silent node: the agent sees FRR's session fail and shuts the peer", func(t *testing.T) {
		undo := silence(t, nns)
		frr.Eventually(t, "the node's bfdd session down, the agent's BGP peer shut down by BFD", func() (bool, string) {
			st, err := vipStatus(t, sock)
			if err != nil {
				return false, err.Error()
			}
			peers := st.GetBgp().GetPeers()
			return nodeSession().Status == "down" && len(peers) == 1 && peers[0].GetShutDown() == "BFD down",
				fmt.Sprintf("node's bfd %+v, bgp peers %v", nodeSession(), peers)
		})
		undo()
		healthy(t, "session, peer and route back after the silence")
	})

	t.Run("an agent restart leaves the session to FRR", func(t *testing.T) {
		downs := bfdCounters(t, router, nodeAddr).SessionDown
		agent.stop(t)
		frr.Eventually(t, "FRR sees the BGP session go", func() (bool, string) {
			s := neighborState(t, router)
			return s != "Established", s
		})
		if n := nodeSession(); n.Status != "up" {
			t.Errorf("node's bfd session after the agent stopped: %+v, want it kept Up", n)
		}
		start("restarted")
		healthy(t, "fresh again after the restart")
		if c := bfdCounters(t, router, nodeAddr); c.SessionDown != downs {
			t.Errorf("the router's BFD session went down %d times during the restart", c.SessionDown-downs)
		}
	})
}
