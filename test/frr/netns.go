package frr

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Programs used, by full path: a go test environment may lack /usr/sbin in
// PATH.
const (
	IPCmd    = "/usr/sbin/ip"
	VtyshCmd = "/usr/bin/vtysh"
	// DaemonDir holds FRR's daemons in the Debian package.
	DaemonDir = "/usr/lib/frr"
)

// HangGuard bounds every wait for a network event, only so that a broken
// build fails instead of hanging: the tests assert outcomes, never speed.
const HangGuard = 90 * time.Second

// RequireRoot fails (never skips) the test when not root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it creates network namespaces, veth pairs and runs FRR daemons (run go test as root, as make test does)")
	}
}

// RequireTool fails the test when a program it runs is missing, naming the
// Debian package to install.
func RequireTool(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): install the Debian package %s, e.g. by running hack/install-deps.sh as root", path, err, pkg)
	}
}

// NetNS is a named network namespace of one test, deleted in t.Cleanup
// with everything inside it.
type NetNS struct {
	Name string
}

// NewNetNS creates a namespace named prefix and a random suffix (keep
// prefix short: interface names derived from it must fit 15 bytes), with
// its loopback up.
func NewNetNS(t testing.TB, prefix string) *NetNS {
	t.Helper()
	RequireRoot(t)
	RequireTool(t, IPCmd, "iproute2")
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &NetNS{Name: prefix + "-" + hex.EncodeToString(b[:])}
	Run(t, IPCmd, "netns", "add", n.Name)
	t.Cleanup(func() {
		if out, err := exec.Command(IPCmd, "netns", "del", n.Name).CombinedOutput(); err != nil {
			t.Errorf("delete network namespace %s: %v: %s", n.Name, err, out)
		}
	})
	n.IP(t, "link", "set", "lo", "up")
	return n
}

// Run runs a command and fails the test when it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// IP runs ip(8) on the namespace (ip -n).
func (n *NetNS) IP(t testing.TB, args ...string) string {
	t.Helper()
	return Run(t, IPCmd, append([]string{"-n", n.Name}, args...)...)
}

// Command returns a command that runs a program inside the namespace (ip
// netns exec, which execs the program: its pid is the program's).
func (n *NetNS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(IPCmd, append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Exec runs a program inside the namespace with stdin and returns its
// combined output, failing the test when it fails.
func (n *NetNS) Exec(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := n.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v: %s", n.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Link connects a and b with a veth pair named ifA in a and ifB in b, both
// up, with the given addresses in prefix form (IPv6 ones without duplicate
// address detection, so that they can be used at once).
func Link(t testing.TB, a *NetNS, ifA string, addrsA []string, b *NetNS, ifB string, addrsB []string) {
	t.Helper()
	Run(t, IPCmd, "link", "add", ifA, "netns", a.Name, "type", "veth", "peer", "name", ifB, "netns", b.Name)
	for _, side := range []struct {
		ns    *NetNS
		iface string
		addrs []string
	}{{a, ifA, addrsA}, {b, ifB, addrsB}} {
		for _, p := range side.addrs {
			args := []string{"addr", "add", p, "dev", side.iface}
			if netip.MustParsePrefix(p).Addr().Is6() {
				args = append(args, "nodad")
			}
			side.ns.IP(t, args...)
		}
		side.ns.IP(t, "link", "set", side.iface, "up")
	}
}

// Eventually polls cond until it holds, failing the test with cond's last
// explanation after HangGuard.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(HangGuard)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, HangGuard, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
