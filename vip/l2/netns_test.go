package l2

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/novaedge/novaedge/vip/l2/internal/rawsock"
)

// hangGuard bounds every wait for a network event, only so that a broken
// build fails instead of hanging: the tests assert order and outcome, never
// speed.
const hangGuard = 60 * time.Second

// ipCmd is run by full path: a go test environment may lack /usr/sbin.
const ipCmd = "/usr/sbin/ip"

// requireRoot fails (never skips) the test when not root or without ip(8):
// these tests are the only check that the package works on a real kernel.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it creates network namespaces, a bridge and veth pairs (run go test as root, as make test does)")
	}
	if _, err := os.Stat(ipCmd); err != nil {
		t.Fatalf("%s is missing (%v): install the Debian package iproute2, e.g. by running hack/install-deps.sh as root", ipCmd, err)
	}
}

// testNS is a named network namespace of one test, deleted in t.Cleanup
// with everything inside it.
type testNS struct{ name string }

func newTestNS(t *testing.T, role string) *testNS {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &testNS{name: "nel2-" + hex.EncodeToString(b[:]) + "-" + role}
	run(t, ipCmd, "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command(ipCmd, "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("delete network namespace %s: %v: %s", n.name, err, out)
		}
	})
	n.ip(t, "link", "set", "lo", "up")
	return n
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *testNS) ip(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, ipCmd, append([]string{"-n", n.name}, args...)...)
}

// cat reads a file as seen from inside the namespace (/proc/sys/net and
// /proc/net show the namespace of the reader).
func (n *testNS) cat(t *testing.T, path string) string {
	t.Helper()
	return strings.TrimSpace(run(t, ipCmd, "netns", "exec", n.name, "cat", path))
}

// do calls f on an OS thread inside the namespace; sockets f opens stay in
// it. The thread is never unlocked, so the runtime ends it with the
// goroutine instead of reusing a thread whose namespace changed.
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

// segment is one Ethernet segment: a bridge in its own namespace and a
// veth port for each peer namespace.
type segment struct{ sw *testNS }

func newSegment(t *testing.T) *segment {
	t.Helper()
	sw := newTestNS(t, "sw")
	sw.ip(t, "link", "add", "br0", "type", "bridge")
	sw.ip(t, "link", "set", "br0", "up")
	return &segment{sw: sw}
}

// attach connects ns to the bridge through a veth pair: eth0 in ns with the
// given MAC and addresses (IPv6 ones without duplicate address detection).
func (s *segment) attach(t *testing.T, ns *testNS, port, mac string, addrs ...string) {
	t.Helper()
	run(t, ipCmd, "link", "add", "eth0", "netns", ns.name, "address", mac, "type", "veth", "peer", "name", port, "netns", s.sw.name)
	s.sw.ip(t, "link", "set", port, "master", "br0")
	s.sw.ip(t, "link", "set", port, "up")
	for _, a := range addrs {
		args := []string{"addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		ns.ip(t, args...)
	}
	ns.ip(t, "link", "set", "eth0", "up")
}

// capture reads the frames of one EtherType on eth0 of a namespace.
type capture struct {
	t      *testing.T
	conn   *rawsock.Conn
	frames chan []byte
}

func newCapture(t *testing.T, ns *testNS, etherType uint16) *capture {
	t.Helper()
	c := &capture{t: t, frames: make(chan []byte, 1024)}
	if err := ns.do(t, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c.conn, err = rawsock.Listen(ifi.Index, etherType, nil)
		return err
	}); err != nil {
		t.Fatalf("capture in %s: %v", ns.name, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(c.frames)
		buf := make([]byte, 2048)
		for {
			n, kind, err := c.conn.Read(buf)
			if err != nil {
				return
			}
			if kind == rawsock.Outgoing {
				continue
			}
			c.frames <- bytes.Clone(buf[:n])
		}
	}()
	t.Cleanup(func() {
		_ = c.conn.Close()
		wg.Wait()
	})
	return c
}

// next returns the next frame for which match returns true, dropping the
// ones before it.
func (c *capture) next(what string, match func([]byte) bool) []byte {
	c.t.Helper()
	timeout := time.After(hangGuard)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("waiting for %s: capture closed", what)
			}
			if match(f) {
				return f
			}
		case <-timeout:
			c.t.Fatalf("no %s within %v", what, hangGuard)
		}
	}
}

// send writes a frame from the namespace's eth0.
func (c *capture) send(frame []byte, dst net.HardwareAddr) {
	c.t.Helper()
	if err := c.conn.Write(frame, dst); err != nil {
		c.t.Fatalf("send frame: %v", err)
	}
}

// eventually waits until cond holds, polling; the wait is bounded only by
// hangGuard.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, hangGuard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger logs through t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(b, "\n")))
	return len(b), nil
}

// fakeClock is a Clock stepped by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	ft.arm(d)
	c.timers = append(c.timers, ft)
	return ft
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, ft := range c.timers {
		if ft.armed && !ft.when.After(c.now) {
			ft.armed = false
			select {
			case ft.ch <- c.now:
			default:
			}
		}
	}
}

type fakeTimer struct {
	c     *fakeClock
	ch    chan time.Time
	when  time.Time
	armed bool
}

// arm is called with c.mu held.
func (ft *fakeTimer) arm(d time.Duration) {
	ft.when, ft.armed = ft.c.now.Add(d), true
	if d <= 0 {
		ft.armed = false
		ft.ch <- ft.c.now
	}
}

func (ft *fakeTimer) C() <-chan time.Time { return ft.ch }

func (ft *fakeTimer) Stop() bool {
	ft.c.mu.Lock()
	defer ft.c.mu.Unlock()
	was := ft.armed
	ft.armed = false
	select {
	case <-ft.ch:
	default:
	}
	return was
}

func (ft *fakeTimer) Reset(d time.Duration) bool {
	was := ft.Stop()
	ft.c.mu.Lock()
	defer ft.c.mu.Unlock()
	ft.arm(d)
	return was
}
