package bfd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// hangGuard bounds every wait for a network event, only so that a broken
// build fails instead of hanging: the tests assert order and outcome, never
// speed, and a healthy run needs a small fraction of it.
const hangGuard = 60 * time.Second

// Programs the tests run, by full path: a go test environment may lack
// /usr/sbin in PATH.
const (
	ipCmd  = "/usr/sbin/ip"
	nftCmd = "/usr/sbin/nft"
)

// requireRoot fails (never skips) the test when not root: these tests are
// the only check that the package works on a real kernel and against FRR,
// and a skip would let a CI without privileges pass them silently.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it creates network namespaces, veth pairs and nftables rules (run go test as root, as make test does)")
	}
}

// requireTool fails the test when a program it runs is missing.
func requireTool(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (%v): install the Debian package %s, e.g. by running hack/install-deps.sh as root", path, err, pkg)
	}
}

// testNS is a named network namespace of one test ("nebfd-" and a random
// suffix), deleted in t.Cleanup together with everything inside it: links,
// addresses, nftables rules, sockets' bindings.
type testNS struct {
	name string
}

func newTestNS(t *testing.T) *testNS {
	t.Helper()
	requireRoot(t)
	requireTool(t, ipCmd, "iproute2")
	requireTool(t, nftCmd, "nftables")
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &testNS{name: "nebfd-" + hex.EncodeToString(b[:])}
	run(t, ipCmd, "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command(ipCmd, "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("delete network namespace %s: %v: %s", n.name, err, out)
		}
	})
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// run runs a command and fails the test when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *testNS) ip(t *testing.T, args ...string) {
	t.Helper()
	run(t, ipCmd, append([]string{"-n", n.name}, args...)...)
}

// exec runs a program inside the namespace.
func (n *testNS) exec(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(ipCmd, append([]string{"netns", "exec", n.name}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v: %s", n.name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// do calls f on an OS thread inside the namespace; sockets f opens stay in
// the namespace. The thread is never unlocked, so the runtime ends it with
// the goroutine instead of reusing a thread whose namespace changed.
func (n *testNS) do(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(n.name)
		if err != nil {
			done <- fmt.Errorf("open namespace %s: %w", n.name, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", n.name, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// link connects a and b with a veth pair named ifA in a and ifB in b, up,
// with the given addresses (IPv6 ones without duplicate address detection,
// so that they can be bound at once).
func link(t *testing.T, a *testNS, ifA string, addrsA []string, b *testNS, ifB string, addrsB []string) {
	t.Helper()
	run(t, ipCmd, "link", "add", ifA, "netns", a.name, "type", "veth", "peer", "name", ifB, "netns", b.name)
	for _, side := range []struct {
		ns    *testNS
		iface string
		addrs []string
	}{{a, ifA, addrsA}, {b, ifB, addrsB}} {
		for _, p := range side.addrs {
			args := []string{"addr", "add", p, "dev", side.iface}
			if netip.MustParsePrefix(p).Addr().Is6() {
				args = append(args, "nodad")
			}
			side.ns.ip(t, args...)
		}
		side.ns.ip(t, "link", "set", side.iface, "up")
	}
}

// silence drops every BFD control packet the namespace sends (its own
// output, not its input), as a node whose BFD went quiet, and returns the
// function that lets them through again. The table goes with the namespace.
func (n *testNS) silence(t *testing.T) func() {
	t.Helper()
	n.exec(t, fmt.Sprintf(`table inet nebfd {
	chain out {
		type filter hook output priority 0; policy accept;
		udp dport %d drop
	}
}
`, Port), nftCmd, "-f", "-")
	return func() {
		t.Helper()
		n.exec(t, "", nftCmd, "delete", "table", "inet", "nebfd")
	}
}

// startSpeaker starts a speaker in the namespace and closes it in t.Cleanup.
func (n *testNS) startSpeaker(t *testing.T, opts Options) *Speaker {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t, n.name)
	}
	var sp *Speaker
	if err := n.do(t, func() error {
		var err error
		sp, err = NewSpeaker(opts)
		return err
	}); err != nil {
		t.Fatalf("NewSpeaker in %s: %v", n.name, err)
	}
	t.Cleanup(func() {
		if err := sp.Close(); err != nil {
			t.Errorf("close speaker: %v", err)
		}
	})
	return sp
}

// addSession adds a session from inside the namespace, where its socket
// must be opened.
func (n *testNS) addSession(t *testing.T, sp *Speaker, cfg SessionConfig) SessionKey {
	t.Helper()
	var key SessionKey
	if err := n.do(t, func() error {
		var err error
		key, err = sp.AddSession(cfg)
		return err
	}); err != nil {
		t.Fatalf("AddSession %v in %s: %v", cfg.Peer, n.name, err)
	}
	return key
}

// testLogger logs at Info level through t.Log.
func testLogger(t *testing.T, prefix string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t, prefix}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + ": " + string(bytes.TrimRight(b, "\n")))
	return len(b), nil
}

// watcher reads a subscription and hands out each session's changes in
// order, keeping the other sessions' changes for later.
type watcher struct {
	t       *testing.T
	ch      <-chan StateChange
	backlog []StateChange
}

// watch subscribes to sp until the test ends.
func watch(t *testing.T, sp *Speaker) *watcher {
	ch, cancel := sp.Subscribe()
	t.Cleanup(cancel)
	return &watcher{t: t, ch: ch}
}

// next waits for the next state change of key and returns it.
func (w *watcher) next(key SessionKey) StateChange {
	w.t.Helper()
	for i, ev := range w.backlog {
		if ev.SessionKey == key {
			w.backlog = append(w.backlog[:i], w.backlog[i+1:]...)
			return ev
		}
	}
	timeout := time.After(hangGuard)
	for {
		select {
		case ev, ok := <-w.ch:
			if !ok {
				w.t.Fatalf("%v: event channel closed", key)
			}
			if ev.SessionKey == key {
				return ev
			}
			w.backlog = append(w.backlog, ev)
		case <-timeout:
			w.t.Fatalf("%v: no state change within %v", key, hangGuard)
		}
	}
}

// until consumes the changes of key until it reaches state, and returns
// the change that got there.
func (w *watcher) until(key SessionKey, state State) StateChange {
	w.t.Helper()
	for {
		if ev := w.next(key); ev.To == state {
			return ev
		}
	}
}

// eventually polls cond until it holds, failing with its last explanation
// after hangGuard.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, hangGuard, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
