// Package demo runs hack/demo.sh, the script behind `make demo`, so the
// quick start of the README cannot rot unnoticed.
package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoScript builds the binaries and runs hack/demo.sh as `make demo`
// does, but inside a network namespace of its own, so the demo's VIP and
// ports never touch this host's interfaces.
func TestDemoScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the demo binds a VIP and needs root: run make test as root")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	ns := fmt.Sprintf("nvt-demo-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v\n%s", err, out)
	}

	cmd := exec.Command("ip", "netns", "exec", ns, "bash", "hack/demo.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NOVAEDGE_AGENT="+filepath.Join(bin, "novaedge-agent"), "NOVAEDGECTL="+filepath.Join(bin, "novaedgectl"))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{
		"0 errors, 0 warnings",
		"127.0.0.1:18081: hello from web-1",
		"ready: version 1",
		"novaedge_agent_ready 1",
		"Ready:            yes",
		"Bound addresses:  127.0.10.1/32 on lo",
		"demo-vip  127.0.10.1:9000/tcp  FAST",
		"request 1: hello from web-",
		"request 4: hello from web-",
		`got back "hello over TCP"`,
		"released 127.0.10.1/32 from lo",
		// Part 2: the XDP fast path in namespaces.
		"web-vip  10.97.0.10:80/tcp  FAST",
		"hello from b1",
		"hello from b2",
		"10.97.0.10  80    tcp    1   nat",
		"ct_created",
		"nat_reply",
		"detached to-client",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
	addrs, err := exec.Command("ip", "-n", ns, "-br", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil || strings.Contains(string(addrs), "127.0.10.1") {
		t.Fatalf("the VIP is still bound after the demo: %s %v", addrs, err)
	}
}
