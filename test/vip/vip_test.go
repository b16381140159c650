package vip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/novaedge/novaedge/cli"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
)

// The topology: router (AS 65000) r-n 10.82.1.1/24 ⟷ n-r 10.82.1.2/24 node
// (AS 65100) n-c 10.82.2.2/24 ⟷ c-n 10.82.2.3/24 client. The L2ARP VIP is in
// the client's subnet and names no interface: the agent picks n-c by the
// route of the subnet.
const (
	routerAddr = "10.82.1.1"
	nodeAddr   = "10.82.1.2"
	bgpVIP     = "10.200.0.10"
	l2VIP      = "10.82.2.50"
)

const config = `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: bgp-vip
spec:
  address: ` + bgpVIP + `/32
  mode: BGP
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + routerAddr + `
        as: 65000
        holdTime: 9s
    communities: ["65000:100"]
BFD---
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: l2-vip
spec:
  address: ` + l2VIP + `/32
  mode: L2ARP
`

// bfdConfig enables BFD on the BGP VIP, at the functional tests' 3 × 300 ms.
const bfdConfig = `  bfd:
    enabled: true
    detectMultiplier: 3
    desiredMinTxInterval: 300ms
    requiredMinRxInterval: 300ms
`

const frrConfig = `frr defaults traditional
hostname tor
!
router bgp 65000
 bgp router-id 10.82.1.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor ` + nodeAddr + ` remote-as 65100
 neighbor ` + nodeAddr + ` timers connect 1
BFD address-family ipv4 unicast
  neighbor ` + nodeAddr + ` activate
 exit-address-family
!
`

func buildAgent(t *testing.T) string {
	t.Helper()
	return frr.BuildCommand(t, "github.com/novaedge/novaedge/cmd/novaedge-agent")
}

// agentProc is one agent process in the node namespace.
type agentProc struct {
	cmd    *exec.Cmd
	log    *frr.SyncBuffer
	exited chan struct{}
	err    error
}

func startAgent(t *testing.T, ns *frr.NetNS, bin, dir, name string) *agentProc {
	t.Helper()
	return runAgent(t, ns, bin, dir, "node1", name)
}

// runAgent runs the agent binary in ns as node, in standalone mode on
// dir/config.yaml, with its admin socket (dir/agent.sock) and state under
// dir, plus extra flags. name labels it in failures. The process is stopped
// in t.Cleanup unless it already ended, and its log shown if t failed.
func runAgent(t *testing.T, ns *frr.NetNS, bin, dir, node, name string, extra ...string) *agentProc {
	t.Helper()
	a := &agentProc{log: &frr.SyncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"--standalone", "--config", filepath.Join(dir, "config.yaml"), "--node-name", node,
		"--admin-socket", filepath.Join(dir, "agent.sock"), "--metrics-addr", "", "--handoff-socket", "",
		"--state-dir", filepath.Join(dir, "state"), "--fastpath", "off", "--bind-local-vips=false",
		"--watch=false", "--log-level", "debug"}, extra...)
	a.cmd = ns.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start agent %s: %v", name, err)
	}
	go func() {
		a.err = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-a.exited:
			case <-time.After(frr.HangGuard):
				t.Errorf("agent %s did not stop on SIGTERM: killed", name)
				_ = a.cmd.Process.Kill()
				<-a.exited
			}
		}
		if t.Failed() {
			t.Logf("agent %s log:\n%s", name, a.log.String())
		}
	})
	return a
}

// stop sends SIGTERM and waits for a clean exit.
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-a.exited:
	case <-time.After(frr.HangGuard):
		t.Fatalf("agent did not exit within %v of SIGTERM", frr.HangGuard)
	}
	if a.err != nil {
		t.Fatalf("agent exited with %v", a.err)
	}
}

// ctl runs novaedgectl against the agent and returns its stdout.
func ctl(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Execute(append(args, "--socket", sock), &out, &errb, "test"); code != cli.ExitOK {
		return out.String(), fmt.Errorf("novaedgectl %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), nil
}

func vipStatus(t *testing.T, sock string) (*pb.VIPStatusResponse, error) {
	out, err := ctl(t, sock, "vip", "status", "-o", "json")
	if err != nil {
		return nil, err
	}
	var st pb.VIPStatusResponse
	if err := protojson.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("vip status -o json: %w: %s", err, out)
	}
	return &st, nil
}

// FRR's JSON, the fields the test reads.
type (
	frrRoute struct {
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		Nexthops  []struct {
			IP  string `json:"ip"`
			FIB bool   `json:"fib"`
		} `json:"nexthops"`
	}
	frrPaths struct {
		Paths []struct {
			Stale     bool `json:"stale"`
			Community *struct {
				String string `json:"string"`
			} `json:"community"`
			Peer struct {
				PeerID string `json:"peerId"`
			} `json:"peer"`
		} `json:"paths"`
	}
	frrNeighbor struct {
		BGPState string `json:"bgpState"`
	}
)

// fib returns the next hops zebra installed for the BGP VIP.
func fib(t *testing.T, r *frr.Router) []string {
	var out map[string][]frrRoute
	r.JSON(t, "show ip route "+bgpVIP+"/32 json", &out)
	var hops []string
	for _, rt := range out[bgpVIP+"/32"] {
		if rt.Protocol != "bgp" || !rt.Selected || !rt.Installed {
			continue
		}
		for _, h := range rt.Nexthops {
			if h.FIB {
				hops = append(hops, h.IP)
			}
		}
	}
	return hops
}

func bgpPath(t *testing.T, r *frr.Router) (found, stale bool, community string) {
	var out frrPaths
	r.JSON(t, "show bgp ipv4 unicast "+bgpVIP+"/32 json", &out)
	for _, p := range out.Paths {
		if p.Peer.PeerID == nodeAddr {
			if p.Community != nil {
				community = p.Community.String
			}
			return true, p.Stale, community
		}
	}
	return false, false, ""
}

func neighborState(t *testing.T, r *frr.Router) string {
	var out map[string]frrNeighbor
	r.JSON(t, "show bgp neighbors "+nodeAddr+" json", &out)
	return out[nodeAddr].BGPState
}

// probe sends a UDP datagram to the L2 VIP from the client namespace and
// waits for the node's answer: the client's kernel must resolve the VIP by
// ARP (only the agent answers it) and the node's kernel, which accepts the
// VIP bound on lo, answers with ICMP port unreachable, which a connected
// UDP socket reports as "connection refused".
func probe(clientNS string) error {
	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked: the runtime ends it with the
		// goroutine instead of reusing a thread in another namespace.
		runtime.LockOSThread()
		h, err := netns.GetFromName(clientNS)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		c, err := net.Dial("udp4", net.JoinHostPort(l2VIP, "9"))
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = c.Close() }()
		if _, err := c.Write([]byte("probe")); err != nil {
			done <- err
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 16))
		if errors.Is(err, syscall.ECONNREFUSED) {
			done <- nil
			return
		}
		done <- fmt.Errorf("no answer from the node (want connection refused): %w", err)
	}()
	return <-done
}

// linkMAC returns the MAC of a link in a namespace.
func linkMAC(t *testing.T, ns *frr.NetNS, link string) string {
	t.Helper()
	var out []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(ns.IP(t, "-j", "link", "show", link)), &out); err != nil || len(out) != 1 {
		t.Fatalf("ip -j link show %s: %v", link, err)
	}
	return out[0].Address
}

// neighMAC returns the client's neighbour entry for the L2 VIP.
func neighMAC(t *testing.T, ns *frr.NetNS) (mac, state string) {
	t.Helper()
	var out []struct {
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal([]byte(ns.IP(t, "-j", "neigh", "show", l2VIP)), &out); err != nil {
		t.Fatalf("ip -j neigh show: %v", err)
	}
	if len(out) == 0 {
		return "", "none"
	}
	return out[0].LLAddr, strings.Join(out[0].State, ",")
}

// TestAgentAnnouncesVIPs: BGP and L2 announcement, status, and graceful
// restart through a SIGTERM of the agent.
func TestAgentAnnouncesVIPs(t *testing.T) { testAgent(t, false) }

// TestAgentBFD: the BGP VIP enables BFD, FRR runs bfdd and asks for BFD on
// the neighbor; the agent's session comes Up with the VIP's timers. The
// restart is left out: the agent's BFD speaker is embedded and its sessions
// end with it (C bit clear), and FRR drops the node's paths when BFD goes
// down, graceful restart or not — see the report on a long-lived BFD
// process.
func TestAgentBFD(t *testing.T) { testAgent(t, true) }

func testAgent(t *testing.T, withBFD bool) {
	frr.RequireRoot(t)
	frr.RequireTool(t, frr.VtyshCmd, "frr")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bgpd"), "frr")
	bin := buildAgent(t)

	rns := frr.NewNetNS(t, "nevip-r")
	nns := frr.NewNetNS(t, "nevip-n")
	cns := frr.NewNetNS(t, "nevip-c")
	frr.Link(t, rns, "r-n", []string{routerAddr + "/24"}, nns, "n-r", []string{nodeAddr + "/24"})
	frr.Link(t, cns, "c-n", []string{"10.82.2.3/24"}, nns, "n-c", []string{"10.82.2.2/24"})
	cfg, rcfg := strings.Replace(config, "BFD", "", 1), strings.Replace(frrConfig, "BFD", "", 1)
	daemons := []frr.Daemon{{Name: "zebra", Config: "hostname tor\n"}}
	if withBFD {
		cfg = strings.Replace(config, "BFD", bfdConfig, 1)
		rcfg = strings.Replace(frrConfig, "BFD", " neighbor "+nodeAddr+" bfd\n", 1)
		daemons = append(daemons, frr.Daemon{Name: "bfdd", Config: "hostname tor\n"})
	}
	router := frr.Start(t, rns, append(daemons, frr.Daemon{Name: "bgpd", Config: rcfg, Args: []string{"-p", "179"}})...)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	agent := startAgent(t, nns, bin, dir, "first")

	t.Run("FRR learns the BGP VIP", func(t *testing.T) {
		frr.Eventually(t, "router FIB: "+bgpVIP+"/32 via "+nodeAddr, func() (bool, string) {
			hops := fib(t, router)
			return slices.Equal(hops, []string{nodeAddr}), fmt.Sprintf("next hops %v", hops)
		})
		if found, stale, comm := bgpPath(t, router); !found || stale || comm != "65000:100" {
			t.Errorf("FRR's path from the node: found %v, stale %v, community %q; want a fresh path with 65000:100", found, stale, comm)
		}
	})

	t.Run("the L2 VIP is answered on the client's segment", func(t *testing.T) {
		nodeMAC := linkMAC(t, nns, "n-c")
		frr.Eventually(t, "client reaches "+l2VIP, func() (bool, string) {
			if err := probe(cns.Name); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		if mac, state := neighMAC(t, cns); mac != nodeMAC {
			t.Errorf("client's neighbour entry for %s: %q (%s), want the node's n-c MAC %s", l2VIP, mac, state, nodeMAC)
		}
	})

	t.Run("novaedgectl shows the announcements", func(t *testing.T) {
		var st *pb.VIPStatusResponse
		frr.Eventually(t, "vip status: both announced, the peer Established", func() (bool, string) {
			var err error
			if st, err = vipStatus(t, sock); err != nil {
				return false, err.Error()
			}
			ok := len(st.GetVips()) == 2 && st.GetVips()[0].GetAnnounced() && st.GetVips()[1].GetAnnounced() &&
				len(st.GetBgp().GetPeers()) == 1 && st.GetBgp().GetPeers()[0].GetState() == "Established"
			return ok, protojson.Format(st)
		})
		want := map[string]string{"bgp-vip": "BGP ANNOUNCE " + bgpVIP + " ", "l2-vip": "L2ARP ACTIVE " + l2VIP + " n-c"}
		for _, v := range st.GetVips() {
			got := fmt.Sprintf("%s %s %s %s", v.GetMode(), v.GetRole(), strings.Join(v.GetAddresses(), ","), strings.Join(v.GetInterfaces(), ","))
			if got != want[v.GetVip()] {
				t.Errorf("vip %s: %q, want %q", v.GetVip(), got, want[v.GetVip()])
			}
		}
		if st.GetL2().GetGarps() == 0 || st.GetL2().GetArpReplies() == 0 {
			t.Errorf("L2 counters %v: want gratuitous ARPs sent and ARP replies to the client", st.GetL2())
		}
		if b := st.GetBgp(); b.GetLocalAs() != 65100 || b.GetRouterId() != nodeAddr || b.GetRestarting() || len(b.GetRoutes()) != 1 {
			t.Errorf("bgp status %v: want AS 65100, router ID %s (the source towards the peer), not restarting, one route", b, nodeAddr)
		}
		out, err := ctl(t, sock, "bgp", "peers", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var b pb.BGPStatus
		if err := protojson.Unmarshal([]byte(out), &b); err != nil || len(b.GetPeers()) != 1 ||
			b.GetPeers()[0].GetAddress() != routerAddr || b.GetPeers()[0].GetState() != "Established" || b.GetPeers()[0].GetAdvertised() != 1 {
			t.Errorf("bgp peers -o json (%v): %s", err, out)
		}
		if !withBFD {
			out, err := ctl(t, sock, "bfd")
			if err != nil || out != "BFD is not running: no BGP VIP on this node enables it\n" {
				t.Errorf("bfd without a BFD VIP (%v): %q", err, out)
			}
		}
		frr.Eventually(t, "bfd session with the router Up", func() (bool, string) {
			if !withBFD {
				return true, ""
			}
			out, err := ctl(t, sock, "bfd", "-o", "json")
			if err != nil {
				return false, err.Error()
			}
			var f pb.BFDStatus
			if err := protojson.Unmarshal([]byte(out), &f); err != nil {
				return false, err.Error()
			}
			ss := f.GetSessions()
			return len(ss) == 1 && ss[0].GetPeer() == routerAddr && ss[0].GetLocal() == nodeAddr && ss[0].GetState() == "Up" && ss[0].GetDetectionTimeMs() == 900, out
		})
		if out, err := ctl(t, sock, "bgp", "routes"); err != nil || !strings.Contains(out, bgpVIP+"/32  bgp-vip  65000:100") {
			t.Errorf("bgp routes (%v):\n%s", err, out)
		}
	})

	if withBFD {
		return
	}

	t.Run("SIGTERM keeps the route through graceful restart", func(t *testing.T) {
		agent.stop(t)
		frr.Eventually(t, "FRR sees the session go", func() (bool, string) {
			s := neighborState(t, router)
			return s != "Established", s
		})
		frr.Eventually(t, "the node's path is stale", func() (bool, string) {
			found, stale, _ := bgpPath(t, router)
			return found && stale, fmt.Sprintf("found %v stale %v", found, stale)
		})
		if hops := fib(t, router); !slices.Equal(hops, []string{nodeAddr}) {
			t.Errorf("router FIB while the agent is away: %v, want %s kept", hops, nodeAddr)
		}
	})

	t.Run("a restarted agent refreshes the route", func(t *testing.T) {
		startAgent(t, nns, bin, dir, "restarted")
		frr.Eventually(t, "the node's path is fresh again", func() (bool, string) {
			found, stale, _ := bgpPath(t, router)
			return found && !stale && neighborState(t, router) == "Established", fmt.Sprintf("found %v stale %v", found, stale)
		})
		if hops := fib(t, router); !slices.Equal(hops, []string{nodeAddr}) {
			t.Errorf("router FIB after the restart: %v", hops)
		}
		st, err := vipStatus(t, sock)
		if err != nil {
			t.Fatal(err)
		}
		if !st.GetBgp().GetRestarting() {
			t.Errorf("bgp status after the restart %v: want restarting (the marker of the first run)", st.GetBgp())
		}
		if err := probe(cns.Name); err != nil {
			t.Errorf("client after the restart: %v", err)
		}
	})
}
