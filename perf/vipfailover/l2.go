package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/novaedge/novaedge/cli"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/perf/vipfailover/internal/arp"
)

// The L2 topology: one segment with node-a 10.86.0.1 (active), node-b
// 10.86.0.2 (standby, from the novaedge.io/l2-nodes annotation) and the
// client 10.86.0.3; the VIP is 10.86.0.50.
const (
	l2NodeA  = "10.86.0.1"
	l2NodeB  = "10.86.0.2"
	l2Client = "10.86.0.3"
	l2VIP    = "10.86.0.50"
)

func l2Config(bfdMs int) string {
	s := `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: l2-vip
  annotations:
    novaedge.io/l2-nodes: node-a=` + l2NodeA + `,node-b=` + l2NodeB + `
spec:
  address: ` + l2VIP + `/32
  mode: L2ARP
`
	if bfdMs > 0 {
		s += fmt.Sprintf("  bfd:\n    enabled: true\n    detectMultiplier: 3\n    desiredMinTxInterval: %[1]dms\n    requiredMinRxInterval: %[1]dms\n", bfdMs)
	}
	return s
}

// vipReason returns the L2 VIP's announced flag and reason in an agent's
// vip status.
func vipReason(sock string) (bool, string, error) {
	var out, errb bytes.Buffer
	if code := cli.Execute([]string{"vip", "status", "-o", "json", "--socket", sock}, &out, &errb, "bench"); code != cli.ExitOK {
		return false, "", fmt.Errorf("novaedgectl vip status: exit %d: %s", code, errb.String())
	}
	var st pb.VIPStatusResponse
	if err := protojson.Unmarshal(out.Bytes(), &st); err != nil {
		return false, "", fmt.Errorf("vip status -o json: %w", err)
	}
	for _, v := range st.GetVips() {
		if v.GetVip() == "l2-vip" {
			return v.GetAnnounced(), v.GetReason(), nil
		}
	}
	return false, "", fmt.Errorf("vip status: no l2-vip: %s", out.String())
}

// runL2 builds the segment once; each repetition starts both agents
// afresh, waits until node-a is active with node-b's heartbeats up, then
// SIGKILLs node-a's agent (t0) while the client asks for the VIP by ARP
// every 10 ms; t1 is the first ARP frame from node-b's MAC claiming the
// VIP (its gratuitous ARP or its answer), from which the client's traffic
// goes to node-b.
func runL2(bfdMs, reps int, agentBin string, logf func(string, ...any)) ([]sample, error) {
	e := &env{}
	defer e.close()
	nss, err := e.bridged("nevl", l2NodeA, l2NodeB, l2Client)
	if err != nil {
		return nil, err
	}
	nsA, nsB, nsC := nss[0], nss[1], nss[2]
	ifB, err := linkMAC(nsB)
	if err != nil {
		return nil, err
	}
	sock, err := arp.Open(nsC, "eth0", netip.MustParseAddr(l2Client))
	if err != nil {
		return nil, err
	}
	e.onClose(func() { _ = sock.Close() })
	vip := netip.MustParseAddr(l2VIP)

	var (
		mu     sync.Mutex
		frames []arp.Frame
	)
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 256)
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			f, ok, err := sock.Read(buf)
			if err != nil {
				readerDone <- err
				return
			}
			if ok && f.SenderIP == vip {
				mu.Lock()
				frames = append(frames, f)
				mu.Unlock()
			}
		}
	}()
	e.onClose(func() {
		close(stop)
		if err := <-readerDone; err != nil {
			logf("client's arp reader: %v", err)
		}
	})

	var out []sample
	for i := 0; i < reps; i++ {
		var agents []*process
		var socks []string
		for _, n := range []struct{ ns, name string }{{nsA, "node-a"}, {nsB, "node-b"}} {
			dir, err := os.MkdirTemp("", "vipfailover-"+n.name+"-")
			if err != nil {
				return out, err
			}
			defer func() { _ = os.RemoveAll(dir) }()
			if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(l2Config(bfdMs)), 0o644); err != nil {
				return out, err
			}
			p, err := startAgent(e, n.ns, agentBin, dir, n.name)
			if err != nil {
				return out, err
			}
			agents, socks = append(agents, p), append(socks, filepath.Join(dir, "agent.sock"))
		}
		err := eventually("node-a active, node-b standing by with heartbeats up", func() (bool, string) {
			a, ra, errA := vipReason(socks[0])
			b, rb, errB := vipReason(socks[1])
			if errA != nil || errB != nil {
				return false, fmt.Sprint(errA, errB)
			}
			return a && strings.Contains(ra, "active") && !b && strings.Contains(rb, "active node-a is up"), ra + " / " + rb
		})
		if err != nil {
			return out, err
		}
		// The client resolves the VIP to node-a before the kill, as a
		// client with traffic in flight would have.
		time.Sleep(500 * time.Millisecond)
		probeStop := make(chan struct{})
		probeDone := make(chan error, 1)
		go func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				if err := sock.Request(vip); err != nil {
					probeDone <- err
					return
				}
				select {
				case <-probeStop:
					probeDone <- nil
					return
				case <-t.C:
				}
			}
		}()
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		if err := agents[0].kill(); err != nil {
			return out, fmt.Errorf("SIGKILL node-a's agent: %w", err)
		}
		var t1 time.Time
		err = eventually("an ARP frame for the VIP from node-b", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range frames {
				if f.At.After(t0) && bytes.Equal(f.SenderMAC, ifB) {
					t1 = f.At
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d frames", len(frames))
		})
		close(probeStop)
		if perr := <-probeDone; perr != nil && err == nil {
			err = fmt.Errorf("send ARP request: %w", perr)
		}
		if err != nil {
			return out, err
		}
		s := sample{d: t1.Sub(t0)}
		logf("L2, heartbeats 3 × %d ms #%d: %v", cmpOr(bfdMs, 300), i+1, s.d.Round(time.Millisecond))
		out = append(out, s)
		for _, p := range agents {
			p.stop()
		}
		mu.Lock()
		frames = nil
		mu.Unlock()
	}
	return out, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// linkMAC returns eth0's MAC in ns.
func linkMAC(ns string) (net.HardwareAddr, error) {
	out, err := run(ipCmd, "-n", ns, "-o", "link", "show", "eth0")
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	for i, w := range f {
		if w == "link/ether" && i+1 < len(f) {
			return net.ParseMAC(f[i+1])
		}
	}
	return nil, fmt.Errorf("no MAC in %q", out)
}
