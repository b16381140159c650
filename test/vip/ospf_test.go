package vip

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
)

// The OSPF topology: router r-n 10.83.1.1/24 ⟷ n-r 10.83.1.2/24 node. Both
// run FRR's zebra and ospfd; the router's ospfd is configured by the test,
// the node's starts empty and the agent drives it through vtysh. Hello 1s
// and dead 4s keep adjacencies quick to form and to fail; nothing asserts
// how quick. The router has the higher priority and becomes the DR, as a
// top-of-rack router usually is: a node that sees a DR declared in the
// router's Hellos ends its wait at once (BackupSeen) instead of waiting the
// first dead interval (40 s: ospfd starts the wait timer when
// "ip ospf area" comes, before the dead interval is set).
const (
	ospfRouterAddr = "10.83.1.1"
	ospfNodeAddr   = "10.83.1.2"
	ospfVIP        = "10.200.0.30"
	ospfKeyID      = 1
	// ospfRouterCost is the cost of the router's interface towards the
	// node: its route to the VIP costs this plus the VIP's cost.
	ospfRouterCost = 10
	ospfVIPCost    = 20
)

// ospfConfig is the agent's standalone configuration: an OSPF ProxyVIP
// whose md5 key comes from a Secret holding key.
func ospfConfig(key string) string {
	return `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: ospf-vip
spec:
  address: ` + ospfVIP + `/32
  mode: OSPF
  ospfConfig:
    areaID: 0
    cost: ` + fmt.Sprint(ospfVIPCost) + `
    helloInterval: 1
    deadInterval: 4
    authType: md5
    authKeyID: ` + fmt.Sprint(ospfKeyID) + `
    authKeySecretRef:
      name: ospf-key
      namespace: novaedge-system
      key: key
    gracefulRestart: true
---
apiVersion: v1
kind: Secret
metadata:
  name: ospf-key
  namespace: novaedge-system
data:
  key: ` + base64.StdEncoding.EncodeToString([]byte(key)) + `
`
}

var ospfRouterConfig = `frr defaults traditional
hostname tor
!
router ospf
 ospf router-id ` + ospfRouterAddr + `
!
interface r-n
 ip ospf area 0
 ip ospf cost ` + fmt.Sprint(ospfRouterCost) + `
 ip ospf hello-interval 1
 ip ospf dead-interval 4
 ip ospf priority 100
 ip ospf authentication message-digest
 ip ospf message-digest-key 1 md5 secret
!
`

// startOSPFAgent runs the agent in the node namespace, driving the node's
// FRR in vtyDir with uplink n-r.
func startOSPFAgent(t *testing.T, ns *frr.NetNS, bin, dir, vtyDir, name string) *agentProc {
	t.Helper()
	return runAgent(t, ns, bin, dir, "node1", name, "--frr-vty-dir", vtyDir, "--frr-vtysh", frr.VtyshCmd, "--ospf-uplinks", "n-r")
}

// ospfNeighborState is the state of the node's adjacency as the router
// sees it ("" when the router does not list the node).
func ospfNeighborState(t *testing.T, r *frr.Router) string {
	var out struct {
		Neighbors map[string][]struct {
			State string `json:"state"`
		} `json:"neighbors"`
	}
	r.JSON(t, "show ip ospf neighbor json", &out)
	for _, n := range out.Neighbors[ospfNodeAddr] {
		return n.State
	}
	return ""
}

// ospfRoute returns the router's installed OSPF route to the VIP: its
// metric and next hops (found false when there is none).
func ospfRoute(t *testing.T, r *frr.Router) (found bool, metric int, hops []string, all string) {
	var out map[string][]struct {
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		Metric    int    `json:"metric"`
		Nexthops  []struct {
			IP string `json:"ip"`
		} `json:"nexthops"`
	}
	r.JSON(t, "show ip route ospf json", &out)
	for _, rt := range out[ospfVIP+"/32"] {
		if rt.Protocol != "ospf" || !rt.Selected || !rt.Installed {
			continue
		}
		for _, h := range rt.Nexthops {
			hops = append(hops, h.IP)
		}
		return true, rt.Metric, hops, fmt.Sprint(out)
	}
	return false, 0, nil, fmt.Sprint(out)
}

func ospfStatus(t *testing.T, sock string) (*pb.OSPFStatus, string, error) {
	out, err := ctl(t, sock, "ospf", "-o", "json")
	if err != nil {
		return nil, out, err
	}
	var st pb.OSPFStatus
	if err := protojson.Unmarshal([]byte(out), &st); err != nil {
		return nil, out, fmt.Errorf("ospf -o json: %w: %s", err, out)
	}
	return &st, out, nil
}

// TestAgentOSPF: the agent binary drives the node's FRR so that the
// router's ospfd forms a Full adjacency and learns the VIP /32; status
// and novaedgectl show it; an agent restart leaves FRR's configuration
// (and so the route) in place; a wrong md5 key is reported as such.
func TestAgentOSPF(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, frr.VtyshCmd, "frr")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "ospfd"), "frr")
	bin := buildAgent(t)

	rns := frr.NewNetNS(t, "neospf-r")
	nns := frr.NewNetNS(t, "neospf-n")
	frr.Link(t, rns, "r-n", []string{ospfRouterAddr + "/24"}, nns, "n-r", []string{ospfNodeAddr + "/24"})
	nns.IP(t, "link", "set", "lo", "up")
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "ospfd", Config: ospfRouterConfig},
	)
	node := frr.Start(t, nns,
		frr.Daemon{Name: "zebra", Config: "hostname node\n"},
		frr.Daemon{Name: "ospfd", Config: "hostname node\n"},
	)

	dir := t.TempDir()
	writeConfig := func(key string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(ospfConfig(key)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("secret")
	sock := filepath.Join(dir, "agent.sock")
	agent := startOSPFAgent(t, nns, bin, dir, node.Dir, "first")

	t.Run("adjacency Full and the VIP in the router's OSPF routes", func(t *testing.T) {
		frr.Eventually(t, "router sees the node Full", func() (bool, string) {
			s := ospfNeighborState(t, router)
			return strings.HasPrefix(s, "Full"), "router's neighbour state " + s
		})
		frr.Eventually(t, "router's OSPF route to "+ospfVIP+"/32 via the node", func() (bool, string) {
			found, metric, hops, all := ospfRoute(t, router)
			return found && metric == ospfRouterCost+ospfVIPCost && len(hops) == 1 && hops[0] == ospfNodeAddr, all
		})
		// The agent bound the VIP on lo: ospfd advertises only bound
		// addresses.
		if out := nns.IP(t, "-o", "addr", "show", "dev", "lo"); !strings.Contains(out, ospfVIP+"/32") {
			t.Errorf("VIP not bound on the node's lo:\n%s", out)
		}
	})

	t.Run("novaedgectl shows the Full neighbour and the route", func(t *testing.T) {
		frr.Eventually(t, "ospf -o json: the router Full, the VIP advertised", func() (bool, string) {
			st, out, err := ospfStatus(t, sock)
			if err != nil {
				return false, err.Error()
			}
			ns, rs := st.GetNeighbors(), st.GetRoutes()
			ok := st.GetRunning() && st.GetRouterId() == ospfNodeAddr && len(ns) == 1 && ns[0].GetState() == "Full" &&
				ns[0].GetRouterId() == ospfRouterAddr && ns[0].GetAddress() == ospfRouterAddr && ns[0].GetInterface() == "n-r" &&
				len(rs) == 1 && rs[0].GetVip() == "ospf-vip" && rs[0].GetPrefix() == ospfVIP+"/32" && rs[0].GetCost() == ospfVIPCost &&
				len(st.GetProblems()) == 0 && st.GetError() == ""
			return ok, out
		})
		st, err := vipStatus(t, sock)
		if err != nil {
			t.Fatal(err)
		}
		if v := st.GetVips(); len(v) != 1 || v[0].GetVip() != "ospf-vip" || v[0].GetMode() != "OSPF" || v[0].GetRole() != "ANNOUNCE" || !v[0].GetAnnounced() {
			t.Errorf("vip status: %s", protojson.Format(st))
		}
		out, err := ctl(t, sock, "ospf")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Router ID " + ospfNodeAddr, ospfRouterAddr + "  " + ospfRouterAddr + "  n-r", ospfVIP + "/32  ospf-vip  0.0.0.0  20"} {
			if !strings.Contains(out, want) {
				t.Errorf("ospf table lacks %q:\n%s", want, out)
			}
		}
		if run := node.Vtysh(t, "show running-config"); strings.Contains(run, "ip ospf bfd") {
			t.Errorf("ip ospf bfd configured without BFD on the VIP:\n%s", run)
		}
	})

	// The restarted agent lives until the test ends, not its subtest.
	parent := t
	t.Run("an agent restart leaves FRR's configuration and the route", func(t *testing.T) {
		before := node.Vtysh(t, "show running-config")
		agent.stop(t)
		if after := node.Vtysh(t, "show running-config"); after != before {
			t.Errorf("FRR's configuration changed when the agent stopped:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if found, _, _, all := ospfRoute(t, router); !found {
			t.Errorf("router lost the VIP when the agent stopped: %s", all)
		}
		agent = startOSPFAgent(parent, nns, bin, dir, node.Dir, "restarted")
		frr.Eventually(t, "restarted agent reconciled and reports the Full neighbour", func() (bool, string) {
			st, out, err := ospfStatus(t, sock)
			if err != nil {
				return false, err.Error()
			}
			return st.GetLastReconcileUnixMs() != 0 && st.GetError() == "" &&
				len(st.GetNeighbors()) == 1 && st.GetNeighbors()[0].GetState() == "Full" && len(st.GetRoutes()) == 1, out
		})
		if after := node.Vtysh(t, "show running-config"); after != before {
			t.Errorf("the restarted agent rewrote FRR's configuration:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		// The same configuration twice: the second agent sends FRR nothing
		// (a removal and rewrite would end up in the same running
		// configuration, but reset the adjacency).
		if log := agent.log.String(); strings.Contains(log, "ospf apply") {
			t.Errorf("the restarted agent wrote to FRR although nothing changed:\n%s", log)
		}
		if s := ospfNeighborState(t, router); !strings.HasPrefix(s, "Full") {
			t.Errorf("router's adjacency after the agent's restart: %q, want Full", s)
		}
	})

	t.Run("an md5 key mismatch is reported clearly", func(t *testing.T) {
		writeConfig("wrong")
		if out, err := ctl(t, sock, "reload"); err != nil {
			t.Fatalf("reload: %v: %s", err, out)
		}
		want := fmt.Sprintf("OSPF authentication mismatch on n-r with %s: the md5 keys differ (key id %d)", ospfRouterAddr, ospfKeyID)
		frr.Eventually(t, "vip status names the mismatch", func() (bool, string) {
			st, err := vipStatus(t, sock)
			if err != nil {
				return false, err.Error()
			}
			v := st.GetVips()
			ok := len(v) == 1 && !v[0].GetAnnounced() && strings.Contains(v[0].GetReason(), want) &&
				len(st.GetOspf().GetProblems()) > 0 && st.GetOspf().GetProblems()[0] == want
			return ok, protojson.Format(st)
		})
		frr.Eventually(t, "router drops the node and the route", func() (bool, string) {
			s := ospfNeighborState(t, router)
			found, _, _, all := ospfRoute(t, router)
			return !strings.HasPrefix(s, "Full") && !found, "neighbour " + s + "; routes " + all
		})
		out, err := ctl(t, sock, "ospf")
		if err != nil || !strings.Contains(out, "Problems:\n  "+want+"\n") {
			t.Errorf("ospf table (%v) lacks the mismatch %q:\n%s", err, want, out)
		}
		out, err = ctl(t, sock, "vip", "status")
		if err != nil || !strings.Contains(out, "OSPF problem: "+want+"\n") {
			t.Errorf("vip status (%v) lacks the mismatch %q:\n%s", err, want, out)
		}
	})
}
