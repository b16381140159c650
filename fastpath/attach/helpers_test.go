package attach

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// requireRoot fails (never skips) the test when not root: these tests are the
// only proof the package works against a real kernel, and a skip would let an
// unprivileged CI pass them silently.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it creates network namespaces and attaches XDP programs")
	}
}

// testNS is a network namespace of one test with a netlink handle in it.
// It is unnamed, so it disappears once the handle, the netlink sockets and
// the sockets opened inside it are closed, even if the test binary dies.
type testNS struct {
	ns netns.NsHandle
	h  *netlink.Handle
}

func newTestNS(t *testing.T) *testNS {
	t.Helper()
	requireRoot(t)
	var ns netns.NsHandle
	if err := onThrowawayThread(func() error {
		var err error
		ns, err = netns.New()
		return err
	}); err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Errorf("close network namespace: %v", err)
		}
	})
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle in test namespace: %v", err)
	}
	t.Cleanup(h.Close)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatalf("find lo: %v", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	return &testNS{ns: ns, h: h}
}

// run calls f on an OS thread inside the namespace: the package's functions
// act in the namespace of their calling thread.
func (n *testNS) run(f func() error) error {
	return onThrowawayThread(func() error {
		if err := netns.Set(n.ns); err != nil {
			return fmt.Errorf("enter test namespace: %w", err)
		}
		return f()
	})
}

// must is run for steps that cannot fail in a passing test.
func (n *testNS) must(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := n.run(f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// onThrowawayThread runs f on a goroutine locked to its OS thread and never
// unlocked, so the thread, whose namespace f may have changed, ends with it.
func onThrowawayThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- f()
	}()
	return <-done
}

func (n *testNS) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatalf("find %s: %v", name, err)
	}
	return l
}

// xdpOn returns the XDP state netlink reports for name.
func (n *testNS) xdpOn(t *testing.T, name string) (progID uint32, mode Mode) {
	t.Helper()
	x := n.link(t, name).Attrs().Xdp
	if x == nil || !x.Attached {
		return 0, ModeAuto
	}
	return x.ProgId, modeFromAttached(x.AttachMode)
}

// target resolves one interface inside the namespace.
func (n *testNS) target(t *testing.T, name string) Target {
	t.Helper()
	var targets []Target
	n.must(t, "resolve "+name, func() error {
		var err error
		targets, err = Resolve([]string{name})
		return err
	})
	if len(targets) != 1 {
		t.Fatalf("resolve %s: got %d targets, want 1", name, len(targets))
	}
	return targets[0]
}

// pair is two namespaces joined by a veth: end A sends, end B (where XDP
// goes) receives. Each end has one queue so packets from A reach B's XDP in
// the order they were sent, and permanent neighbour entries so no ARP
// exchange (which an XDP_DROP program would also drop, holding the next
// datagram back in the neighbour queue) comes between them.
type pair struct {
	a, b         *testNS
	nameA, nameB string
	addrA, addrB netip.Addr
}

const (
	vethA = "fpat-a"
	vethB = "fpat-b"
)

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{a: newTestNS(t), b: newTestNS(t), nameA: vethA, nameB: vethB}
	p.addrA = netip.MustParseAddr("10.77.0.1")
	p.addrB = netip.MustParseAddr("10.77.0.2")
	p.connect(t)
	return p
}

// connect creates the veth (again, after a test deleted it) and configures
// both ends.
func (p *pair) connect(t *testing.T) {
	t.Helper()
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: p.nameA, NumTxQueues: 1, NumRxQueues: 1},
		PeerName:        p.nameB,
		PeerNamespace:   netlink.NsFd(p.b.ns),
		PeerNumTxQueues: 1,
		PeerNumRxQueues: 1,
	}
	if err := p.a.h.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s/%s: %v", p.nameA, p.nameB, err)
	}
	la, lb := p.a.link(t, p.nameA), p.b.link(t, p.nameB)
	for _, end := range []struct {
		ns       *testNS
		l        netlink.Link
		addr     netip.Addr
		peerAddr netip.Addr
		peerMAC  net.HardwareAddr
	}{
		{p.a, la, p.addrA, p.addrB, lb.Attrs().HardwareAddr},
		{p.b, lb, p.addrB, p.addrA, la.Attrs().HardwareAddr},
	} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: end.addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := end.ns.h.AddrAdd(end.l, addr); err != nil {
			t.Fatalf("add %s to %s: %v", end.addr, end.l.Attrs().Name, err)
		}
		if err := end.ns.h.LinkSetUp(end.l); err != nil {
			t.Fatalf("bring %s up: %v", end.l.Attrs().Name, err)
		}
		if err := end.ns.h.NeighSet(&netlink.Neigh{
			LinkIndex:    end.l.Attrs().Index,
			Family:       netlink.FAMILY_V4,
			State:        netlink.NUD_PERMANENT,
			IP:           end.peerAddr.AsSlice(),
			HardwareAddr: end.peerMAC,
		}); err != nil {
			t.Fatalf("add neighbour %s on %s: %v", end.peerAddr, end.l.Attrs().Name, err)
		}
	}
}

// disconnect deletes the veth, both ends at once, as a driver reload or a
// CNI recreating an interface would.
func (p *pair) disconnect(t *testing.T) {
	t.Helper()
	if err := p.a.h.LinkDel(p.a.link(t, p.nameA)); err != nil {
		t.Fatalf("delete veth: %v", err)
	}
}

// prober sends numbered UDP datagrams from A to B, the "ping" these tests
// tell XDP_PASS from XDP_DROP with. It never decides a datagram was dropped
// by waiting for a timeout: a datagram is known dropped when a later one
// arrives first, since both went through the same queue in order.
type prober struct {
	t    *testing.T
	send *net.UDPConn
	recv *net.UDPConn
	next int
}

// patience bounds the wait for a datagram that must arrive. It is not a
// performance threshold: only a datagram that is really lost runs into it.
const patience = 30 * time.Second

func (p *pair) prober(t *testing.T) *prober {
	t.Helper()
	pr := &prober{t: t}
	p.b.must(t, "listen in B", func() error {
		var err error
		pr.recv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.addrB.AsSlice()})
		return err
	})
	t.Cleanup(func() { _ = pr.recv.Close() })
	port := pr.recv.LocalAddr().(*net.UDPAddr).Port
	p.a.must(t, "dial from A", func() error {
		var err error
		pr.send, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.addrB.AsSlice(), Port: port})
		return err
	})
	t.Cleanup(func() { _ = pr.send.Close() })
	pr.warmUp()
	return pr
}

// warmUp sends datagrams until one arrives. A veth that was just brought up
// transmits through the noop qdisc, dropping everything without an error,
// until the kernel's link watcher activates it; a test must not take such a
// loss for XDP's doing. Once datagram j has arrived, every later one will, so
// warmUp ends by reading up to the last one sent, leaving nothing in flight.
func (pr *prober) warmUp() {
	pr.t.Helper()
	deadline := time.Now().Add(patience)
	buf := make([]byte, 64)
	last := 0
	for arrived := false; !arrived; {
		if time.Now().After(deadline) {
			pr.t.Fatalf("no datagram crossed the veth in %s", patience)
		}
		last++
		if _, err := pr.send.Write([]byte("w" + strconv.Itoa(last))); err != nil {
			pr.t.Fatalf("send warm-up datagram: %v", err)
		}
		// This deadline only paces the retries: a datagram slower than
		// it is read by the next round.
		if err := pr.recv.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			pr.t.Fatal(err)
		}
		n, err := pr.recv.Read(buf)
		if err == nil && string(buf[:n]) == "w"+strconv.Itoa(last) {
			return
		}
		arrived = err == nil
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			pr.t.Fatalf("receive warm-up datagram: %v", err)
		}
	}
	if err := pr.recv.SetReadDeadline(time.Now().Add(patience)); err != nil {
		pr.t.Fatal(err)
	}
	for {
		n, err := pr.recv.Read(buf)
		if err != nil {
			pr.t.Fatalf("warm-up datagram w%d never arrived: %v", last, err)
		}
		if string(buf[:n]) == "w"+strconv.Itoa(last) {
			return
		}
	}
}

// send sends the next datagram and returns its number.
func (pr *prober) send1() int {
	pr.t.Helper()
	pr.next++
	if _, err := pr.send.Write([]byte(strconv.Itoa(pr.next))); err != nil {
		pr.t.Fatalf("send datagram %d: %v", pr.next, err)
	}
	return pr.next
}

// passes sends a datagram, waits for it and returns the numbers of the
// datagrams that arrived before it (and after the previous wait).
func (pr *prober) passes() (earlier []int) {
	pr.t.Helper()
	want := pr.send1()
	if err := pr.recv.SetReadDeadline(time.Now().Add(patience)); err != nil {
		pr.t.Fatal(err)
	}
	buf := make([]byte, 64)
	for {
		n, err := pr.recv.Read(buf)
		if err != nil {
			pr.t.Fatalf("datagram %d never arrived (XDP dropped it?): %v", want, err)
		}
		got, err := strconv.Atoi(string(buf[:n]))
		if err != nil {
			pr.t.Fatalf("unexpected datagram %q", buf[:n])
		}
		if got == want {
			return earlier
		}
		earlier = append(earlier, got)
	}
}

// xdpProg loads a program returning verdict for every packet.
func xdpProg(t *testing.T, name string, verdict int32) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, verdict), asm.Return()},
		License:      "Dual BSD/GPL",
	})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	t.Cleanup(func() { _ = prog.Close() })
	return prog
}

const (
	xdpDrop = 1
	xdpPass = 2
)

func passProg(t *testing.T) *ebpf.Program { return xdpProg(t, "test_pass", xdpPass) }
func dropProg(t *testing.T) *ebpf.Program { return xdpProg(t, "test_drop", xdpDrop) }

// countingProg loads a program that passes every packet and counts IPv4 UDP
// packets in counters[slot], so a test can tell which program saw a packet
// and whether any packet was seen by none.
func countingProg(t *testing.T, counters *ebpf.Map, slot int32) *ebpf.Program {
	t.Helper()
	ethIPv4 := int32(binary.NativeEndian.Uint16([]byte{0x08, 0x00}))
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: fmt.Sprintf("test_count%d", slot),
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 14+20),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
			asm.JNE.Imm(asm.R5, ethIPv4, "pass"),
			asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte),
			asm.JNE.Imm(asm.R5, 17, "pass"),
			asm.StoreImm(asm.RFP, -4, int64(slot), asm.Word),
			asm.LoadMapPtr(asm.R1, counters.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "pass"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		t.Fatalf("load counting program: %v", err)
	}
	t.Cleanup(func() { _ = prog.Close() })
	return prog
}

func progID(t *testing.T, prog *ebpf.Program) uint32 {
	t.Helper()
	info, err := prog.Info()
	if err != nil {
		t.Fatalf("program info: %v", err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel does not report program IDs")
	}
	return uint32(id)
}

// pinRoot returns a unique pin root under /sys/fs/bpf, removed (after
// detaching whatever is still pinned there, from inside ns) when t ends.
func pinRoot(t *testing.T, ns *testNS) string {
	t.Helper()
	if err := ensureBPFFS(bpffsMountPoint); err != nil {
		t.Fatalf("bpffs: %v", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "-").Replace(t.Name())
	root := filepath.Join(bpffsMountPoint, "novaedge-attach-test-"+name+"-"+hex.EncodeToString(b[:]))
	t.Cleanup(func() {
		if err := ns.run(func() error {
			_, err := DetachAll(root)
			return err
		}); err != nil {
			t.Errorf("detach leftovers under %s: %v", root, err)
		}
		if err := os.RemoveAll(root); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove pin root %s: %v", root, err)
		}
	})
	return root
}

func newAttacher(t *testing.T, opts Options) *Attacher {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatalf("new attacher: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// adopt runs a.Adopt inside ns and fails the test on error.
func adopt(t *testing.T, ns *testNS, a *Attacher, prog *ebpf.Program, targets ...Target) *Result {
	t.Helper()
	var res *Result
	ns.must(t, "adopt", func() error {
		var err error
		res, err = a.Adopt(prog, targets)
		return err
	})
	if len(res.Interfaces) != len(targets) {
		t.Fatalf("adopt: %d outcomes for %d targets", len(res.Interfaces), len(targets))
	}
	return res
}

func list(t *testing.T, ns *testNS, root string) []Attachment {
	t.Helper()
	var out []Attachment
	ns.must(t, "list", func() error {
		var err error
		out, err = List(root)
		return err
	})
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// recvCounter counts datagrams received by a goroutine and lets the test wait
// for a count without spinning.
type recvCounter struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int64
	err  error
}

func newRecvCounter() *recvCounter {
	c := &recvCounter{}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// add records one receive, or the error that ended receiving.
func (c *recvCounter) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = err
	} else {
		c.n++
	}
	c.cond.Broadcast()
}

func (c *recvCounter) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// waitFor blocks until n datagrams were received, failing the test if the
// receiver stopped first.
func (c *recvCounter) waitFor(t *testing.T, n int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n < n && c.err == nil {
		c.cond.Wait()
	}
	if c.n < n {
		t.Fatalf("receiver stopped after %d of %d datagrams: %v", c.n, n, c.err)
	}
}
