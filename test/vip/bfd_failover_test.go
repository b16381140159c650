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

// The BFD failover topology: one Ethernet segment (a bridge in its own
// namespace) with the router 10.84.0.1 (FRR: zebra, bgpd, bfdd; AS 65000),
// node-a 10.84.0.2 and node-b 10.84.0.3 (agents, AS 65100), each on its
// eth0. Both agents announce the same BGP VIP with BFD at 3 × 300 ms;
// FRR installs it with two next hops (maximum-paths 2).
const (
	bfRouter  = "10.84.0.1"
	bfNodeA   = "10.84.0.2"
	bfNodeB   = "10.84.0.3"
	bfVIP     = "10.200.0.20"
	bfTable   = "novaedge_bfd_silence"
	bfProfile = "novaedge"
)

// bfdFailoverConfig is both agents' configuration: the peer is on their
// shared segment, so one file serves both.
const bfdFailoverConfig = `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: bgp-vip
spec:
  address: ` + bfVIP + `/32
  mode: BGP
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + bfRouter + `
        as: 65000
        holdTime: 9s
  bfd:
    enabled: true
    detectMultiplier: 3
    desiredMinTxInterval: 300ms
    requiredMinRxInterval: 300ms
`

// bfdProfileConfig is bfdd's configuration: the profile bgpd's neighbors
// name, with the functional tests' 3 × 300 ms.
const bfdProfileConfig = `hostname tor
!
bfd
 profile ` + bfProfile + `
  detect-multiplier 3
  receive-interval 300
  transmit-interval 300
 !
!
`

func bfdRouterConfig() string {
	var b strings.Builder
	b.WriteString("frr defaults traditional\nhostname tor\n!\nrouter bgp 65000\n bgp router-id " + bfRouter +
		"\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n")
	for _, n := range []string{bfNodeA, bfNodeB} {
		fmt.Fprintf(&b, " neighbor %[1]s remote-as 65100\n neighbor %[1]s timers connect 1\n neighbor %[1]s bfd\n neighbor %[1]s bfd profile %[2]s\n", n, bfProfile)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 2\n")
	for _, n := range []string{bfNodeA, bfNodeB} {
		fmt.Fprintf(&b, "  neighbor %s activate\n", n)
	}
	b.WriteString(" exit-address-family\n!\n")
	return b.String()
}

// frrBFDPeer is one session in FRR's show bfd peers json, the fields the
// test reads.
type frrBFDPeer struct {
	Peer       string `json:"peer"`
	Status     string `json:"status"`
	Diagnostic string `json:"diagnostic"`
}

// bfdPeers returns FRR's BFD sessions by peer address.
func bfdPeers(t *testing.T, r *frr.Router) map[string]frrBFDPeer {
	var out []frrBFDPeer
	r.JSON(t, "show bfd peers json", &out)
	m := map[string]frrBFDPeer{}
	for _, p := range out {
		m[p.Peer] = p
	}
	return m
}

// vipHops returns the next hops zebra installed for vip/32, sorted.
func vipHops(t *testing.T, r *frr.Router, vip string) []string {
	var out map[string][]frrRoute
	r.JSON(t, "show ip route "+vip+"/32 json", &out)
	var hops []string
	for _, rt := range out[vip+"/32"] {
		if rt.Protocol != "bgp" || !rt.Selected || !rt.Installed {
			continue
		}
		for _, h := range rt.Nexthops {
			if h.FIB {
				hops = append(hops, h.IP)
			}
		}
	}
	slices.Sort(hops)
	return hops
}

// silence drops every IPv4 and IPv6 packet ns receives or sends with
// nftables (the agent keeps running: a killed agent's closing TCP session
// would withdraw its routes without BFD), until the returned function
// removes the table.
func silence(t *testing.T, ns *frr.NetNS) func() {
	t.Helper()
	ns.Exec(t, "table inet "+bfTable+" {\n chain in {\n  type filter hook input priority 0; policy drop;\n }\n chain out {\n  type filter hook output priority 0; policy drop;\n }\n}\n", foNFTables, "-f", "-")
	removed := false
	remove := func() {
		if !removed {
			removed = true
			ns.Exec(t, "", foNFTables, "delete", "table", "inet", bfTable)
		}
	}
	t.Cleanup(remove)
	return remove
}

// bfdTopology builds the BFD failover topology, its namespaces named from
// prefix, and starts FRR (zebra, bfdd, bgpd) on the router. It returns the
// router and the namespaces of node-a and node-b.
func bfdTopology(t *testing.T, prefix string) (*frr.Router, *frr.NetNS, *frr.NetNS) {
	t.Helper()
	_, members := segment(t, prefix, member{"r", bfRouter}, member{"a", bfNodeA}, member{"b", bfNodeB})
	rns, nsA, nsB := members[0], members[1], members[2]
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "bfdd", Config: bfdProfileConfig},
		frr.Daemon{Name: "bgpd", Config: bfdRouterConfig(), Args: []string{"-p", "179"}},
	)
	return router, nsA, nsB
}

// TestBFDFailover: two agents announce one BGP VIP to FRR with BFD; FRR
// installs both paths and its BFD sessions to both are Up. Silencing
// node-b (all its packets dropped, the agent still running) makes FRR's
// bfdd declare the session down on detection time expiry and remove
// node-b's path, keeping node-a's; ending the silence brings the session
// and the path back.
func TestBFDFailover(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, foNFTables, "nftables")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bfdd"), "frr")
	bin := buildAgent(t)

	router, nsA, nsB := bfdTopology(t, "nebf")
	for _, n := range []struct {
		ns   *frr.NetNS
		name string
	}{{nsA, "node-a"}, {nsB, "node-b"}} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(bfdFailoverConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		startNodeAgent(t, n.ns, bin, dir, n.name)
	}

	both := func(t *testing.T, what string) {
		t.Helper()
		frr.Eventually(t, what, func() (bool, string) {
			peers, hops := bfdPeers(t, router), vipHops(t, router, bfVIP)
			ok := peers[bfNodeA].Status == "up" && peers[bfNodeB].Status == "up" && slices.Equal(hops, []string{bfNodeA, bfNodeB})
			return ok, fmt.Sprintf("bfd peers %+v, next hops %v", peers, hops)
		})
	}

	t.Run("both sessions Up, the route has both next hops", func(t *testing.T) {
		both(t, "ECMP route via both nodes and both BFD sessions up")
	})

	t.Run("silencing node-b: FRR's detection time expires, node-b's path goes", func(t *testing.T) {
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
}
