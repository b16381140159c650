package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// fpTopo is client ns ↔ node ns ↔ two backend namespaces, all joined by veth
// pairs, with the agent's fast path on the node's client-facing veth.
type fpTopo struct {
	client, node string
	backends     []string
	bpfRoot      string
	// nodeIfs are the node's veths: the client-facing one first.
	nodeIfs []string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newFPTopo(t *testing.T) *fpTopo {
	t.Helper()
	tp := &fpTopo{client: netns(t), node: netns(t)}
	for range 2 {
		tp.backends = append(tp.backends, netns(t))
	}
	id := fmt.Sprintf("%d", time.Now().UnixNano()%1e5)
	veth := func(a, an, b, bn string) {
		sh(t, "ip", "link", "add", an, "netns", a, "type", "veth", "peer", "name", bn, "netns", b)
		for _, x := range [][2]string{{a, an}, {b, bn}} {
			sh(t, "ip", "-n", x[0], "link", "set", x[1], "up")
			sh(t, "ip", "netns", "exec", x[0], "ethtool", "-K", x[1], "tx", "off")
		}
	}
	veth(tp.client, "c"+id, tp.node, "nc"+id)
	tp.nodeIfs = append(tp.nodeIfs, "nc"+id)
	sh(t, "ip", "-n", tp.client, "addr", "add", "10.96.1.2/24", "dev", "c"+id)
	sh(t, "ip", "-n", tp.node, "addr", "add", "10.96.1.1/24", "dev", "nc"+id)
	sh(t, "ip", "-n", tp.client, "route", "add", "10.96.0.0/24", "via", "10.96.1.1")
	for i, b := range tp.backends {
		nb, bb := fmt.Sprintf("nb%d%s", i, id), fmt.Sprintf("b%d%s", i, id)
		veth(tp.node, nb, b, bb)
		tp.nodeIfs = append(tp.nodeIfs, nb)
		sh(t, "ip", "-n", tp.node, "addr", "add", fmt.Sprintf("10.96.%d.1/24", 10+i), "dev", nb)
		sh(t, "ip", "-n", b, "addr", "add", fmt.Sprintf("10.96.%d.2/24", 10+i), "dev", bb)
		sh(t, "ip", "-n", b, "route", "add", "default", "via", fmt.Sprintf("10.96.%d.1", 10+i))
	}
	sh(t, "ip", "netns", "exec", tp.node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	tp.bpfRoot = fmt.Sprintf("/sys/fs/bpf/nvt-agent-%d-%s", os.Getpid(), id)
	t.Cleanup(func() { _ = os.RemoveAll(tp.bpfRoot) })
	return tp
}

// inNS runs f on a thread inside ns; sockets created there stay in ns.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	h, err := vnetns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves the test's namespace and dies
		// with this goroutine.
		runtime.LockOSThread()
		if err := vnetns.Set(h); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// echoServer serves, on addr in ns, connections that get the server's name
// first and then an echo of everything they send.
func echoServer(t *testing.T, ns, addr, name string) {
	t.Helper()
	var ln net.Listener
	inNS(t, ns, func() {
		var err error
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if _, err := io.WriteString(c, name+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

const fpConfig = `
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: fp-vip}
spec: {address: 10.96.0.10/32, mode: Local, ports: [9000]}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: gw, namespace: t}
spec:
  vipRef: fp-vip
  listeners: [{name: tcp, port: 9000, protocol: TCP}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata: {name: r, namespace: t}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: be}]}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: be, namespace: t}
spec:
  endpoints:
    - {address: 10.96.10.2, port: 7000}
    - {address: 10.96.11.2, port: 7000}
`

// fpConn is a client connection through the VIP that knows its backend.
type fpConn struct {
	c       net.Conn
	r       *bufio.Reader
	backend string
}

func (c *fpConn) roundTrip(msg string) error {
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return err
	}
	if err := c.c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// netOnly enters only the network namespace ns: unlike `ip netns exec`,
// which gives the process a private /sys and so a private bpffs whose pins
// die with it, the agent then pins on the host's bpffs, as on a real node.
func netOnly(ns string) []string {
	return []string{"nsenter", "--net=/run/netns/" + ns}
}

func ctl(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append(netOnly(ns)[1:], append([]string{ctlBinary(t)}, args...)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("novaedgectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func conntrackTotal(t *testing.T, ns, root string) int {
	t.Helper()
	var ct struct {
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(ctl(t, ns, "fastpath", "conntrack", "--bpf-root", root, "-o", "json")), &ct); err != nil {
		t.Fatal(err)
	}
	return ct.Total
}

// TestFastPathSurvivesKill runs the agent with the XDP fast path in a
// network namespace: TCP connections to the VIP are balanced by XDP (NAT)
// over two backends; the agent is killed with SIGKILL while they carry
// traffic, every connection goes on and the conntrack count stays; a new
// agent adopts the pinned state; novaedgectl reads it all; uninstall
// detaches.
func TestFastPathSurvivesKill(t *testing.T) {
	tp := newFPTopo(t)
	for i, b := range tp.backends {
		echoServer(t, b, fmt.Sprintf("10.96.%d.2:7000", 10+i), fmt.Sprintf("backend-%d", i))
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fp.yaml")
	writeFile(t, cfg, fpConfig)
	nodeIf := tp.nodeIfs[0]
	// The fast path runs on every interface of the node: NAT replies come
	// back on the backend side. Generic mode: packets are redirected into
	// veths, which in native mode would need XDP programs on every peer;
	// the end-to-end tests of test/fastpath cover native mode.
	args := []string{"--config", cfg, "--fastpath", "on", "--xdp-mode", "generic", "--bpf-root", tp.bpfRoot}
	for _, ifc := range tp.nodeIfs {
		args = append(args, "--interface", ifc)
	}
	a := startAgentWith(t, netOnly(tp.node), filepath.Join(dir, "a1"), true, args...)

	var conns []*fpConn
	inNS(t, tp.client, func() {
		for i := 0; i < 20; i++ {
			c, err := net.DialTimeout("tcp", "10.96.0.10:9000", 5*time.Second)
			if err != nil {
				t.Errorf("dial %d: %v", i, err)
				return
			}
			conns = append(conns, &fpConn{c: c, r: bufio.NewReader(c)})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	seen := map[string]int{}
	for _, c := range conns {
		defer func() { _ = c.c.Close() }()
		_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		name, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("greeting: %v", err)
		}
		c.backend = strings.TrimSpace(name)
		seen[c.backend]++
		if err := c.roundTrip("hello"); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("connections reached %v, want both backends", seen)
	}
	stats := ctl(t, tp.node, "fastpath", "stats", "--bpf-root", tp.bpfRoot, "-o", "json")
	var counters map[string]uint64
	if err := json.Unmarshal([]byte(stats), &counters); err != nil {
		t.Fatal(err)
	}
	if counters["ct_created"] < 20 || counters["nat_reply"] == 0 {
		t.Fatalf("the connections did not go through XDP: %v", counters)
	}
	before := conntrackTotal(t, tp.node, tp.bpfRoot)

	// Traffic on every connection while the agent is killed.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.roundTrip(fmt.Sprintf("conn %d msg %d", i, n)); err != nil {
					errs <- fmt.Errorf("connection %d (%s) message %d: %w", i, c.backend, n, err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-a.done; err == nil {
		t.Fatal("the agent exited cleanly after SIGKILL")
	}
	time.Sleep(500 * time.Millisecond)
	if got := conntrackTotal(t, tp.node, tp.bpfRoot); got != before {
		t.Errorf("conntrack entries %d after SIGKILL, %d before", got, before)
	}
	// A new agent adopts the pinned maps and links.
	a2 := startAgentWith(t, netOnly(tp.node), filepath.Join(dir, "a2"), true, args...)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := conntrackTotal(t, tp.node, tp.bpfRoot); got != before {
		t.Errorf("conntrack entries %d after the restart, %d before", got, before)
	}
	// The log comes through a pipe: the line may follow the readiness.
	a2.waitLog(t, "the adoption of the pinned state", "adopted fast path state")

	// Inspection reads the pinned state.
	for _, want := range []struct{ args, contains string }{
		{"fastpath status", nodeIf},
		{"fastpath vips", "10.96.0.10"},
		{"fastpath backends", "10.96.11.2:7000"},
		{"fastpath maglev 10.96.0.10:9000/tcp", "65537 slots"},
		{"fastpath conntrack", "10.96.1.2"},
	} {
		got := ctl(t, tp.node, append(strings.Fields(want.args), "--bpf-root", tp.bpfRoot)...)
		if !strings.Contains(got, want.contains) {
			t.Errorf("novaedgectl %s: missing %q in\n%s", want.args, want.contains, got)
		}
	}

	a2.stop(t)
	// SIGTERM leaves the program attached; uninstall removes it.
	if out := ctl(t, tp.node, "fastpath", "status", "--bpf-root", tp.bpfRoot); !strings.Contains(out, "generic") {
		t.Errorf("after SIGTERM the fast path should still be attached:\n%s", out)
	}
	ctl(t, tp.node, "fastpath", "uninstall", "--bpf-root", tp.bpfRoot)
	out, _ := exec.Command("ip", "-n", tp.node, "link", "show", nodeIf).CombinedOutput()
	if strings.Contains(string(out), "xdp") {
		t.Errorf("uninstall left an XDP program on %s:\n%s", nodeIf, out)
	}
}
