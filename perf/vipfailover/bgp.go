package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// The BGP topology: one segment with the router 10.85.0.1 (FRR zebra,
// bgpd, bfdd; AS 65000), node-a 10.85.0.2 and node-b 10.85.0.3 (AS 65100),
// both announcing the VIP; FRR installs it with two next hops.
const (
	bgpRouter = "10.85.0.1"
	bgpNodeA  = "10.85.0.2"
	bgpNodeB  = "10.85.0.3"
	bgpVIP    = "10.201.0.10"
)

// bgpCase is one measured configuration.
type bgpCase struct {
	// speaker is "agent" or "frr": what runs on the nodes.
	speaker string
	// bfdMs is the BFD interval (× 3); zero: no BFD, the hold time (9 s,
	// keepalive 3 s) detects the silence.
	bfdMs int
}

func (c bgpCase) String() string {
	t := "no BFD (hold 9 s, keepalive 3 s)"
	if c.bfdMs > 0 {
		t = fmt.Sprintf("BFD 3 × %d ms", c.bfdMs)
	}
	return c.speaker + ", " + t
}

func bfdProfile(ms int) string {
	return fmt.Sprintf("hostname bfd\n!\nbfd\n profile bench\n  detect-multiplier 3\n  receive-interval %d\n  transmit-interval %d\n !\n!\n", ms, ms)
}

func routerConfig(c bgpCase) string {
	var b strings.Builder
	b.WriteString("frr defaults traditional\nhostname tor\n!\nrouter bgp 65000\n bgp router-id " + bgpRouter +
		"\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n")
	for _, n := range []string{bgpNodeA, bgpNodeB} {
		fmt.Fprintf(&b, " neighbor %[1]s remote-as 65100\n neighbor %[1]s timers connect 1\n neighbor %[1]s timers 3 9\n", n)
		if c.bfdMs > 0 {
			fmt.Fprintf(&b, " neighbor %[1]s bfd\n neighbor %[1]s bfd profile bench\n", n)
		}
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 2\n")
	for _, n := range []string{bgpNodeA, bgpNodeB} {
		fmt.Fprintf(&b, "  neighbor %s activate\n", n)
	}
	b.WriteString(" exit-address-family\n!\n")
	return b.String()
}

// nodeFRRConfig is the FRR↔FRR baseline's node: the VIP announced with a
// network statement (no import check: nothing on the node routes it).
func nodeFRRConfig(c bgpCase, self string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname node\n!\nrouter bgp 65100\n bgp router-id %s\n no bgp ebgp-requires-policy\n no bgp network import-check\n no bgp default ipv4-unicast\n", self)
	fmt.Fprintf(&b, " neighbor %[1]s remote-as 65000\n neighbor %[1]s timers connect 1\n neighbor %[1]s timers 3 9\n", bgpRouter)
	if c.bfdMs > 0 {
		fmt.Fprintf(&b, " neighbor %[1]s bfd\n neighbor %[1]s bfd profile bench\n", bgpRouter)
	}
	fmt.Fprintf(&b, " address-family ipv4 unicast\n  network %s/32\n  neighbor %s activate\n exit-address-family\n!\n", bgpVIP, bgpRouter)
	return b.String()
}

func agentConfig(c bgpCase) string {
	s := `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: bgp-vip
spec:
  address: ` + bgpVIP + `/32
  mode: BGP
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + bgpRouter + `
        as: 65000
        holdTime: 9s
        keepaliveTime: 3s
`
	if c.bfdMs > 0 {
		s += fmt.Sprintf("  bfd:\n    enabled: true\n    detectMultiplier: 3\n    desiredMinTxInterval: %[1]dms\n    requiredMinRxInterval: %[1]dms\n", c.bfdMs)
	}
	return s
}

// hops returns the next hops zebra installed for the VIP, sorted.
func (r *router) hops() ([]string, error) {
	out, err := r.vtysh("show ip route " + bgpVIP + "/32 json")
	if err != nil {
		return nil, err
	}
	var rs map[string][]struct {
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		Nexthops  []struct {
			IP  string `json:"ip"`
			FIB bool   `json:"fib"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		return nil, fmt.Errorf("show ip route json: %w: %s", err, out)
	}
	var hops []string
	for _, rt := range rs[bgpVIP+"/32"] {
		if rt.Protocol == "bgp" && rt.Selected && rt.Installed {
			for _, h := range rt.Nexthops {
				if h.FIB {
					hops = append(hops, h.IP)
				}
			}
		}
	}
	slices.Sort(hops)
	return hops, nil
}

// monitor timestamps the kernel's route and nexthop changes in the
// router's namespace as ip monitor prints them: zebra's writes to the
// FIB, seen at the moment they happen, which polling vtysh (tens of
// milliseconds per call) cannot give.
type monitor struct {
	mu     sync.Mutex
	events []event
	cmd    *exec.Cmd
}

type event struct {
	at   time.Time
	line string
}

func (e *env) watchRoutes(ns string) (*monitor, error) {
	m := &monitor{}
	m.cmd = exec.Command(ipCmd, "-n", ns, "monitor", "route", "nexthop")
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("ip monitor: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			at := time.Now()
			m.mu.Lock()
			m.events = append(m.events, event{at, sc.Text()})
			m.mu.Unlock()
		}
	}()
	e.onClose(func() {
		_ = m.cmd.Process.Kill()
		<-done
		_ = m.cmd.Wait()
	})
	return m, nil
}

// firstAfter returns the first event after from that names the VIP:
// zebra's replacement of the route (through a new nexthop group or with
// its next hops inline).
func (m *monitor) firstAfter(from time.Time) (event, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range m.events {
		if ev.at.After(from) && strings.Contains(ev.line, bgpVIP) {
			return ev, true
		}
	}
	return event{}, false
}

// sample is one failover measurement.
type sample struct {
	d time.Duration
	// poll is t1 from polling vtysh, the coarse cross-check.
	poll time.Duration
	// nft is how long the nft command ran (the silence began within it;
	// t0 is when it returned).
	nft time.Duration
	// note says when the measurement fell back to polling.
	note string
}

// runBGP builds the topology for c, then silences node-b reps times,
// each time measuring from the silence to FRR's route losing node-b.
func runBGP(c bgpCase, reps int, agentBin string, logf func(string, ...any)) ([]sample, error) {
	e := &env{}
	defer e.close()
	nss, err := e.bridged("nevf", bgpRouter, bgpNodeA, bgpNodeB)
	if err != nil {
		return nil, err
	}
	rns, nsA, nsB := nss[0], nss[1], nss[2]
	daemons := []frrDaemon{{name: "zebra", config: "hostname tor\n"}}
	if c.bfdMs > 0 {
		daemons = append(daemons, frrDaemon{name: "bfdd", config: bfdProfile(c.bfdMs)})
	}
	r, err := e.startFRR(rns, append(daemons, frrDaemon{name: "bgpd", config: routerConfig(c), args: []string{"-p", "179"}})...)
	if err != nil {
		return nil, err
	}
	for _, n := range []struct{ ns, name, addr string }{{nsA, "node-a", bgpNodeA}, {nsB, "node-b", bgpNodeB}} {
		if c.speaker == "frr" {
			ds := []frrDaemon{{name: "zebra", config: "hostname node\n"}}
			if c.bfdMs > 0 {
				ds = append(ds, frrDaemon{name: "bfdd", config: bfdProfile(c.bfdMs)})
			}
			// -p 0: the node's bgpd connects out and does not listen.
			if _, err := e.startFRR(n.ns, append(ds, frrDaemon{name: "bgpd", config: nodeFRRConfig(c, n.addr), args: []string{"-p", "0"}})...); err != nil {
				return nil, err
			}
			continue
		}
		dir, err := os.MkdirTemp("", "vipfailover-"+n.name+"-")
		if err != nil {
			return nil, err
		}
		e.onClose(func() { _ = os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(agentConfig(c)), 0o644); err != nil {
			return nil, err
		}
		if _, err := startAgent(e, n.ns, agentBin, dir, n.name); err != nil {
			return nil, err
		}
	}
	mon, err := e.watchRoutes(rns)
	if err != nil {
		return nil, err
	}
	both := func() error {
		return eventually("route via both nodes", func() (bool, string) {
			h, err := r.hops()
			if err != nil {
				return false, err.Error()
			}
			return slices.Equal(h, []string{bgpNodeA, bgpNodeB}), fmt.Sprint(h)
		})
	}
	var out []sample
	for i := 0; i < reps; i++ {
		if err := both(); err != nil {
			return out, err
		}
		// Let the sessions settle at their negotiated rates first.
		time.Sleep(2 * time.Second)
		before := time.Now()
		if err := silence(nsB); err != nil {
			return out, err
		}
		t0 := time.Now()
		var polled time.Time
		err := eventually("node-b's path removed", func() (bool, string) {
			h, err := r.hops()
			if err != nil {
				return false, err.Error()
			}
			polled = time.Now()
			return slices.Equal(h, []string{bgpNodeA}), fmt.Sprint(h)
		})
		if err != nil {
			return out, err
		}
		s := sample{poll: polled.Sub(t0), nft: t0.Sub(before)}
		// The monitor's line may trail the poll that saw the change.
		time.Sleep(200 * time.Millisecond)
		if ev, ok := mon.firstAfter(t0); ok && !ev.at.After(polled) {
			s.d = ev.at.Sub(t0)
		} else {
			s.d, s.note = s.poll, "no route event seen before the poll: vtysh poll time"
		}
		logf("%s #%d: %v (vtysh poll %v, nft %v)", c, i+1, s.d.Round(time.Millisecond), s.poll.Round(time.Millisecond), s.nft.Round(time.Millisecond))
		out = append(out, s)
		if err := unsilence(nsB); err != nil {
			return out, err
		}
	}
	return out, nil
}

// startAgent runs the agent in standalone mode as node, with its state
// in dir and dir/config.yaml.
func startAgent(e *env, ns, bin, dir, node string) (*process, error) {
	return e.start(ns, bin, "--standalone", "--config", filepath.Join(dir, "config.yaml"), "--node-name", node,
		"--admin-socket", filepath.Join(dir, "agent.sock"), "--metrics-addr", "", "--handoff-socket", "",
		"--state-dir", filepath.Join(dir, "state"), "--fastpath", "off", "--bind-local-vips=false",
		"--watch=false", "--log-level", "info")
}
