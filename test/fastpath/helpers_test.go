package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/attach"
	"github.com/novaedge/novaedge/fastpath/datapath"
	"github.com/novaedge/novaedge/fastpath/decap"
	"github.com/novaedge/novaedge/fastpath/flowhash"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// Addresses of the test networks. They exist only inside the namespaces the
// tests create.
var (
	// The client's two addresses, on its veth.
	client4, client4b = netip.MustParseAddr("10.98.1.10"), netip.MustParseAddr("10.98.1.11")
	client6, client6b = netip.MustParseAddr("fd98:1::10"), netip.MustParseAddr("fd98:1::11")
	// The client's gateway: the node (or the ECMP router) on the client link.
	gw4, gw6 = netip.MustParseAddr("10.98.1.1"), netip.MustParseAddr("fd98:1::1")
	// The node's own addresses, on its lo: the SNAT source and the outer
	// source of DSR tunnels (Config.Node.V4/V6).
	node4, node6 = netip.MustParseAddr("10.98.0.1"), netip.MustParseAddr("fd98::1")
	// The VIP of fast entries.
	vip4, vip6 = netip.MustParseAddr("10.98.100.1"), netip.MustParseAddr("fd98:100::1")
	// A VIP whose entries are passed to the slow path (held on the node's lo).
	passVIP4, passVIP6 = netip.MustParseAddr("10.98.100.2"), netip.MustParseAddr("fd98:100::2")
	// A VIP with a single backend, for tests that need every flow on one.
	soloVIP4, soloVIP6 = netip.MustParseAddr("10.98.100.3"), netip.MustParseAddr("fd98:100::3")
)

// Ports.
const (
	// natPort is the port of NAT VIP entries; NAT translates it to
	// backendPort.
	natPort = 80
	// backendPort is where every backend serves TCP and UDP, and the port
	// of the DSR VIP entries using IPIP (DSR cannot change the port).
	backendPort = 8080
	// guePort is the second port backends serve on: the DSR VIP entries
	// using GUE.
	guePort = 8081
	// passPort is the port of the ForwardPass VIP entries.
	passPort = 443
	// nodePort is a port the node's own kernel serves on its non-VIP
	// addresses.
	nodePort = 9000
)

// patience bounds every wait for the network, so a broken fast path fails
// the test instead of hanging it. It is no performance threshold: a healthy
// exchange takes a millisecond.
const patience = 10 * time.Second

// backendLink4 and backendLink6 are the addresses of the link between the
// node and backend i (1-based): host 1 is the node, host 2 the backend.
func backendLink4(i, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 98, byte(10 + i), byte(host)})
}

func backendLink6(i, host int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd98:%d::%d", 10+i, host))
}

// labSeq keeps the names of concurrent labs of this process apart.
var labSeq atomic.Uint32

// lab creates namespaces, links and programs for one test and removes them
// when it ends. Names start with a prefix unique to the test: nvfp-<id>-…
// for namespaces, <id>… for interfaces.
type lab struct {
	t    *testing.T
	id   string
	macs atomic.Uint32

	passOnce sync.Once
	pass     *ebpf.Program
	passErr  error
}

func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the fast path tests create namespaces and load BPF programs: run them as root")
	}
	n := labSeq.Add(1)
	return &lab{t: t, id: fmt.Sprintf("f%d%c", os.Getpid()%10000, 'a'+byte(n%26))}
}

// netNS is a network namespace of a lab.
type netNS struct {
	t    *testing.T
	name string
	h    netns.NsHandle
}

// netns creates the namespace nvfp-<id>-<role>, with lo up, no duplicate
// address detection (addresses are usable at once), no reverse-path filter
// (DSR replies come from a VIP the node has no route to) and, if
// forwarding, IPv4 and IPv6 forwarding on.
func (l *lab) netns(role string, forwarding bool) *netNS {
	t := l.t
	t.Helper()
	name := "nvfp-" + l.id + "-" + role
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = h.Close() })
	n := &netNS{t: t, name: name, h: h}
	sysctls := []string{
		"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0", "net.ipv4.conf.lo.rp_filter=0",
	}
	if forwarding {
		sysctls = append(sysctls, "net.ipv4.ip_forward=1",
			"net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.forwarding=1")
	}
	n.exec(append([]string{"sysctl", "-qw"}, sysctls...)...)
	n.ip("link", "set", "lo", "up")
	return n
}

// ip runs ip(8) in the namespace.
func (n *netNS) ip(args ...string) {
	n.t.Helper()
	run(n.t, "ip", append([]string{"-n", n.name}, args...)...)
}

// exec runs a command in the namespace.
func (n *netNS) exec(args ...string) string {
	n.t.Helper()
	return run(n.t, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// addAddr puts addresses on a device of the namespace.
func (n *netNS) addAddr(dev string, prefixes ...netip.Prefix) {
	n.t.Helper()
	for _, p := range prefixes {
		args := []string{"addr", "add", p.String(), "dev", dev}
		if p.Addr().Is6() {
			args = append(args, "nodad")
		}
		n.ip(args...)
	}
}

// do runs fn on an OS thread switched into the namespace. Sockets, links
// and attachments fn creates belong to the namespace and keep working from
// any goroutine afterwards; goroutines fn starts do not run in it.
func (n *netNS) do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current namespace: %w", err)
	}
	defer func() { _ = orig.Close() }()
	if err := netns.Set(n.h); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", n.name, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked and dies with the goroutine rather
		// than run other goroutines in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("leave namespace %s: %w", n.name, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// must runs fn in the namespace and fails the test on error.
func (n *netNS) must(fn func() error) {
	n.t.Helper()
	if err := n.do(fn); err != nil {
		n.t.Fatal(err)
	}
}

// ifindex returns the index of a device of the namespace.
func (n *netNS) ifindex(dev string) int {
	n.t.Helper()
	var idx int
	n.must(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", dev, n.name, err)
		}
		idx = l.Attrs().Index
		return nil
	})
	return idx
}

// forwarded returns how many IPv4 and IPv6 packets the namespace's kernel
// has forwarded: what a fast path that hands packets to the kernel would
// make grow.
func (n *netNS) forwarded(t *testing.T) uint64 {
	t.Helper()
	var total uint64
	snmp := strings.Split(run(t, "ip", "netns", "exec", n.name, "cat", "/proc/net/snmp"), "\n")
	for i := 0; i+1 < len(snmp); i++ {
		if !strings.HasPrefix(snmp[i], "Ip: ") || !strings.HasPrefix(snmp[i+1], "Ip: ") {
			continue
		}
		names, values := strings.Fields(snmp[i]), strings.Fields(snmp[i+1])
		for j, name := range names {
			if name == "ForwDatagrams" && j < len(values) {
				v, err := strconv.ParseUint(values[j], 10, 64)
				if err != nil {
					t.Fatalf("parse ForwDatagrams %q: %v", values[j], err)
				}
				total += v
			}
		}
		break
	}
	for _, line := range strings.Split(run(t, "ip", "netns", "exec", n.name, "cat", "/proc/net/snmp6"), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Ip6OutForwDatagrams" {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("parse Ip6OutForwDatagrams %q: %v", f[1], err)
			}
			total += v
		}
	}
	return total
}

// run runs a command and fails the test if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// end is one end of a veth pair: its namespace, name and addresses.
type end struct {
	ns    *netNS
	name  string
	addrs []netip.Prefix
}

// veth joins two namespaces with a veth pair of the given MTU. Both ends
// get their addresses, transmit checksum offload off (XDP forwards frames
// as they are, and a partial checksum would reach the receiver unfinished)
// and a permanent neighbour entry for every address of the other end, so
// that bpf_fib_lookup finds the next hop's MAC from the first packet on.
func (l *lab) veth(a, b end, mtu int) {
	l.t.Helper()
	macA, macB := l.mac(), l.mac()
	run(l.t, "ip", "link", "add", "name", a.name, "address", macA, "mtu", strconv.Itoa(mtu), "netns", a.ns.name,
		"type", "veth", "peer", "name", b.name, "address", macB, "mtu", strconv.Itoa(mtu), "netns", b.ns.name)
	for _, e := range []struct {
		self, peer end
		peerMAC    string
	}{{a, b, macB}, {b, a, macA}} {
		e.self.ns.addAddr(e.self.name, e.self.addrs...)
		e.self.ns.ip("link", "set", e.self.name, "up")
		e.self.ns.exec("ethtool", "-K", e.self.name, "tx", "off")
		for _, p := range e.peer.addrs {
			e.self.ns.ip("neigh", "replace", p.Addr().String(), "lladdr", e.peerMAC, "dev", e.self.name, "nud", "permanent")
		}
	}
}

// mac returns a locally administered MAC address unique within the lab.
func (l *lab) mac() string {
	n := l.macs.Add(1)
	return fmt.Sprintf("02:98:%02x:%02x:%02x:%02x", byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// passProgram returns an XDP program that passes every frame, loaded once
// per lab: what a veth peer needs to receive XDP_TX'd or redirected frames.
func (l *lab) passProgram() *ebpf.Program {
	l.t.Helper()
	l.passOnce.Do(func() {
		l.pass, l.passErr = ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "xdp_pass",
			Type:         ebpf.XDP,
			License:      "Dual BSD/GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
		})
		if l.passErr == nil {
			l.t.Cleanup(func() { _ = l.pass.Close() })
		}
	})
	if l.passErr != nil {
		l.t.Fatalf("load xdp_pass program: %v", l.passErr)
	}
	return l.pass
}

// attachPass attaches the XDP_PASS program to dev in native mode.
func (l *lab) attachPass(n *netNS, dev string) {
	l.t.Helper()
	prog := l.passProgram()
	idx := n.ifindex(dev)
	var lk link.Link
	n.must(func() error {
		var err error
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach xdp_pass to %s in %s: %w", dev, n.name, err)
		}
		return nil
	})
	l.t.Cleanup(func() { _ = lk.Close() })
}

// attachDecap loads the DSR decapsulation program for a backend and
// attaches it to its devices in native mode.
func (l *lab) attachDecap(n *netNS, devs ...string) *decap.Decap {
	l.t.Helper()
	d, err := decap.Load(decap.Options{})
	if err != nil {
		l.t.Fatalf("load decap program: %v", err)
	}
	l.t.Cleanup(func() {
		if err := d.Close(); err != nil {
			l.t.Errorf("close decap program: %v", err)
		}
	})
	n.must(func() error {
		for _, dev := range devs {
			mode, err := d.Attach(dev, decap.ModeNative)
			if err != nil {
				return fmt.Errorf("attach decap in %s: %w", n.name, err)
			}
			if mode != decap.ModeNative {
				return fmt.Errorf("decap on %s in %s runs in %v mode, want native", dev, n.name, mode)
			}
		}
		return nil
	})
	return d
}

// fpNode is a namespace running the fast path.
type fpNode struct {
	t    *testing.T
	ns   *netNS
	objs *fastpath.Objects
	mgr  *fastpath.Manager
}

// fastpath loads the fast path, applies cfg with a Manager, attaches the
// program to devs in native mode with fastpath/attach (links pinned under
// a bpffs directory of the test's own) and puts every dev into fp_tx_ports,
// so the program may redirect between them.
func (l *lab) fastpath(n *netNS, role string, devs []string, cfg fastpath.Config) *fpNode {
	t := l.t
	t.Helper()
	objs, err := fastpath.Load(fastpath.LoadOptions{ConntrackSize: 1 << 16, NATSize: 1 << 16})
	if err != nil {
		t.Fatalf("load fast path: %v", err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	mgr, err := fastpath.NewManager(objs, fastpath.ManagerOptions{})
	if err != nil {
		t.Fatalf("new manager: %v", err)
	}
	if _, err := mgr.Apply(cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}

	root := "/sys/fs/bpf/nvfp-e2e-" + l.id + "-" + role
	att, err := attach.New(attach.Options{Root: root, Mode: attach.ModeNative})
	if err != nil {
		t.Fatalf("attacher: %v", err)
	}
	t.Cleanup(func() {
		if err := n.do(func() error {
			_, err := attach.DetachAll(root)
			return errors.Join(err, att.Close())
		}); err != nil {
			t.Errorf("detach fast path in %s: %v", n.name, err)
		}
		if err := os.RemoveAll(root); err != nil {
			t.Errorf("remove %s: %v", root, err)
		}
	})
	n.must(func() error {
		var targets []attach.Target
		for _, dev := range devs {
			nl, err := netlink.LinkByName(dev)
			if err != nil {
				return fmt.Errorf("find %s: %w", dev, err)
			}
			targets = append(targets, attach.Target{Ifname: dev, Ifindex: nl.Attrs().Index})
		}
		res, err := att.Adopt(objs.NovaedgeFastpath, targets)
		if err != nil {
			return fmt.Errorf("attach fast path in %s: %w", n.name, err)
		}
		// What the agent sets on the interfaces it attaches to.
		if err := datapath.PrepareInterfaces(devs); err != nil {
			return err
		}
		for _, o := range res.Interfaces {
			if o.Mode != attach.ModeNative || o.Action != attach.ActionAttached {
				return fmt.Errorf("fast path on %s: %s in %s mode, want attached in native mode", o.Target.Ifname, o.Action, o.Mode)
			}
			idx := uint32(o.Target.Ifindex)
			if err := objs.FpTxPorts.Put(idx, fastpathbpf.FastpathBpfDevmapVal{Ifindex: idx}); err != nil {
				return fmt.Errorf("fp_tx_ports[%s]: %w", o.Target.Ifname, err)
			}
		}
		return nil
	})
	return &fpNode{t: t, ns: n, objs: objs, mgr: mgr}
}

// counters returns the program's counters by name.
func (f *fpNode) counters(t *testing.T) map[string]uint64 {
	t.Helper()
	c, err := f.objs.Counters()
	if err != nil {
		t.Fatalf("read counters: %v", err)
	}
	return c
}

// flow is one tracked flow of fp_conntrack.
type flow struct {
	key fastpathbpf.FastpathFlowKey
	ct  fastpathbpf.FastpathCtValue
}

// conntrack returns the tracked flows to dst (any port if port is 0) of
// protocol proto.
func (f *fpNode) conntrack(t *testing.T, dst netip.Addr, port uint16, proto uint8) []flow {
	t.Helper()
	var out []flow
	want := flowhash.Addr16(dst)
	err := f.objs.RangeConntrack(func(k fastpathbpf.FastpathFlowKey, v fastpathbpf.FastpathCtValue) bool {
		if k.Dst == want && k.Proto == proto && (port == 0 || k.Dport == port) {
			out = append(out, flow{k, v})
		}
		return true
	})
	if err != nil {
		t.Fatalf("iterate conntrack: %v", err)
	}
	return out
}

// lookupFlow returns the conntrack entry of the client → VIP 5-tuple.
func (f *fpNode) lookupFlow(client, vip netip.AddrPort, proto uint8) (fastpathbpf.FastpathCtValue, error) {
	k := flowKey(client, vip, proto)
	var v fastpathbpf.FastpathCtValue
	err := f.objs.LookupConntrack(k, &v)
	return v, err
}

// natMappings counts fp_nat entries of protocol proto towards the node
// address dst.
func (f *fpNode) natMappings(t *testing.T, dst netip.Addr, proto uint8) int {
	t.Helper()
	var (
		k fastpathbpf.FastpathFlowKey
		v fastpathbpf.FastpathNatValue
		n int
	)
	want := flowhash.Addr16(dst)
	it := f.objs.FpNat.Iterate()
	for it.Next(&k, &v) {
		if k.Dst == want && k.Proto == proto {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate fp_nat: %v", err)
	}
	return n
}

func flowKey(src, dst netip.AddrPort, proto uint8) fastpathbpf.FastpathFlowKey {
	family := uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4)
	if !src.Addr().Unmap().Is4() {
		family = uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV6)
	}
	return fastpathbpf.FastpathFlowKey{
		Src: flowhash.Addr16(src.Addr()), Dst: flowhash.Addr16(dst.Addr()),
		Sport: src.Port(), Dport: dst.Port(), Proto: proto, Family: family,
	}
}

// delta is the growth of counters between two readings.
type delta map[string]int64

func diff(before, after map[string]uint64) delta {
	d := delta{}
	for k, v := range after {
		d[k] = int64(v) - int64(before[k])
	}
	return d
}

// grew fails the test unless every named counter grew.
func (d delta) grew(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if d[n] <= 0 {
			t.Errorf("counter %s did not grow (%+d): the packets did not take that XDP path; all changes: %v", n, d[n], d.nonZero())
		}
	}
}

// still fails the test if a named counter changed.
func (d delta) still(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if d[n] != 0 {
			t.Errorf("counter %s changed by %+d; all changes: %v", n, d[n], d.nonZero())
		}
	}
}

// clean fails the test if packets were dropped or handed to the kernel for
// a reason that means the fast path could not forward them itself. except
// names counters a test expects to move.
func (d delta) clean(t *testing.T, except ...string) {
	t.Helper()
	for n, v := range d {
		if v == 0 || !unforwarded(n) {
			continue
		}
		skip := false
		for _, e := range except {
			skip = skip || e == n
		}
		if !skip {
			t.Errorf("counter %s grew by %d; all changes: %v", n, v, d.nonZero())
		}
	}
}

// unforwarded reports whether counter n counts packets the fast path
// should have forwarded but dropped or handed to the kernel.
func unforwarded(n string) bool {
	switch n {
	case "pass_no_neigh", "pass_egress_no_xdp", "pass_fib_other", "pass_malformed":
		return true
	}
	return strings.HasPrefix(n, "drop_")
}

func (d delta) nonZero() map[string]int64 {
	out := map[string]int64{}
	for k, v := range d {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// server is a backend's (or the node's) set of TCP and UDP servers. Each
// answers a TCP line or a UDP datagram m with "<name> m", so that clients
// learn who served them.
type server struct {
	name  string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// serve starts TCP servers on every address (dual-stack wildcard) at each
// of tcpPorts and UDP servers on each of udpAddrs, in namespace n. UDP
// sockets are bound to the addresses so that replies leave from the
// address a datagram came to (a DSR backend answers from the VIP).
func serve(t *testing.T, n *netNS, name string, tcpPorts []uint16, udpAddrs []netip.AddrPort) *server {
	t.Helper()
	s := &server{name: name, conns: map[net.Conn]struct{}{}}
	var closers []func() error
	n.must(func() error {
		for _, p := range tcpPorts {
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
			if err != nil {
				return fmt.Errorf("%s: listen tcp :%d: %w", name, p, err)
			}
			closers = append(closers, ln.Close)
			s.wg.Add(1)
			go s.acceptLoop(ln)
		}
		for _, a := range udpAddrs {
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
			if err != nil {
				return fmt.Errorf("%s: listen udp %s: %w", name, a, err)
			}
			closers = append(closers, pc.Close)
			s.wg.Add(1)
			go s.udpLoop(pc)
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range closers {
			_ = c()
		}
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handle(c)
	}
}

func (s *server) handle(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	prefix := []byte(s.name + " ")
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		_, _ = w.Write(prefix)
		_, _ = w.Write(line)
		// Flush only when nothing more is waiting: a pipelined stream
		// is answered in full-sized segments.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (s *server) udpLoop(pc *net.UDPConn) {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	out := make([]byte, 0, 2048)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		out = append(append(out[:0], s.name+" "...), buf[:n]...)
		_, _ = pc.WriteToUDPAddrPort(out, from)
	}
}

// tcpFlow is a client connection to a server of this package.
type tcpFlow struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialTCP connects from namespace n to remote; local, if valid, fixes the
// source address and port.
func dialTCP(n *netNS, local, remote netip.AddrPort, timeout time.Duration) (*tcpFlow, error) {
	var c net.Conn
	err := n.do(func() error {
		d := net.Dialer{Timeout: timeout}
		if local.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(local)
		}
		var err error
		c, err = d.Dial("tcp", remote.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", remote, err)
	}
	return &tcpFlow{conn: c, r: bufio.NewReader(c)}, nil
}

// mustDialTCP is dialTCP failing the test on error, closing the connection
// at the end of the test.
func mustDialTCP(t *testing.T, n *netNS, local, remote netip.AddrPort) *tcpFlow {
	t.Helper()
	f, err := dialTCP(n, local, remote, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.conn.Close() })
	return f
}

// local returns the connection's client address and port.
func (f *tcpFlow) local() netip.AddrPort {
	return f.conn.LocalAddr().(*net.TCPAddr).AddrPort()
}

// ask sends msg as a line and returns the name of the server that echoed
// it.
func (f *tcpFlow) ask(msg string) (string, error) {
	if err := f.conn.SetDeadline(time.Now().Add(patience)); err != nil {
		return "", err
	}
	if _, err := f.conn.Write([]byte(msg + "\n")); err != nil {
		return "", fmt.Errorf("send %q: %w", msg, err)
	}
	line, err := f.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("answer to %q: %w", msg, err)
	}
	return parseAnswer(strings.TrimSuffix(line, "\n"), msg)
}

// parseAnswer splits "<name> <msg>" and checks msg came back unchanged.
func parseAnswer(answer, msg string) (string, error) {
	name, echoed, ok := strings.Cut(answer, " ")
	if !ok || echoed != msg {
		return "", fmt.Errorf("answer %q does not echo %q", answer, msg)
	}
	return name, nil
}

// dialUDP opens a connected UDP socket in namespace n; local, if valid,
// fixes the source address and port.
func dialUDP(n *netNS, local, remote netip.AddrPort) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := n.do(func() error {
		var laddr *net.UDPAddr
		if local.IsValid() {
			laddr = net.UDPAddrFromAddrPort(local)
		}
		var err error
		c, err = net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(remote))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("udp socket to %s: %w", remote, err)
	}
	return c, nil
}

// askUDP sends msg and returns the name of the server that echoed it. UDP
// may lose a datagram (a full socket buffer), so it sends again up to tries
// times, waiting wait for each answer; answers to earlier messages are
// skipped.
func askUDP(c *net.UDPConn, msg string, tries int, wait time.Duration) (string, error) {
	buf := make([]byte, 2048)
	var lastErr error
	for range tries {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", fmt.Errorf("send %q: %w", msg, err)
		}
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return "", err
		}
		for {
			n, err := c.Read(buf)
			if err != nil {
				lastErr = err
				break
			}
			if name, err := parseAnswer(string(buf[:n]), msg); err == nil {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("no answer to %q after %d tries: %w", msg, tries, lastErr)
}

// site is the standard topology: a client namespace, a node namespace
// running the fast path on all its links, and three backends.
//
//	client (10.98.1.10, .11, fd98:1::10, ::11)
//	   |  <id>c ─ <id>nc
//	node (10.98.1.1; lo 10.98.0.1, fd98::1; ip_forward)
//	   |  <id>n1..3 ─ <id>b1..3   10.98.1{1,2,3}.0/24, fd98:1{1,2,3}::/64, MTU 1600
//	b1, b2, b3 (default route via the node)
//
// The client's veth runs XDP_PASS; the backends run XDP_PASS (NAT) or the
// decapsulation program with the VIPs on lo (DSR). The backend links have
// an MTU of 1600 so that a full-sized client segment still fits once
// encapsulated (TestDSRPathMTU has a backend link where it does not).
type site struct {
	lab      *lab
	client   *netNS
	node     *netNS
	fp       *fpNode
	backends []*backendNS
}

// backendNS is one backend of a site.
type backendNS struct {
	name         string
	ns           *netNS
	addr4, addr6 netip.Addr
	decap        *decap.Decap
}

// siteMode says how the backends of a site receive the fast path's traffic.
type siteMode int

const (
	natBackends siteMode = iota
	dsrBackends
)

func newSite(t *testing.T, mode siteMode, cfg fastpath.Config) *site {
	t.Helper()
	l := newLab(t)
	s := &site{lab: l}
	s.client = l.netns("client", false)
	s.node = l.netns("node", true)
	clientIf, nodeIf := l.id+"c", l.id+"nc"
	l.veth(
		end{s.client, clientIf, []netip.Prefix{pfx(client4, 24), pfx(client4b, 24), pfx(client6, 64), pfx(client6b, 64)}},
		end{s.node, nodeIf, []netip.Prefix{pfx(gw4, 24), pfx(gw6, 64)}}, 1500)
	s.client.ip("route", "add", "default", "via", gw4.String())
	s.client.ip("-6", "route", "add", "default", "via", gw6.String())
	s.node.addAddr("lo", pfx(node4, 32), pfx(node6, 128))
	l.attachPass(s.client, clientIf)

	devs := []string{nodeIf}
	for i := 1; i <= 3; i++ {
		b := &backendNS{name: fmt.Sprintf("b%d", i), addr4: backendLink4(i, 2), addr6: backendLink6(i, 2)}
		b.ns = l.netns(b.name, false)
		nodeDev, beDev := fmt.Sprintf("%sn%d", l.id, i), fmt.Sprintf("%sb%d", l.id, i)
		l.veth(end{s.node, nodeDev, []netip.Prefix{pfx(backendLink4(i, 1), 24), pfx(backendLink6(i, 1), 64)}},
			end{b.ns, beDev, []netip.Prefix{pfx(b.addr4, 24), pfx(b.addr6, 64)}}, 1600)
		b.ns.ip("route", "add", "default", "via", backendLink4(i, 1).String())
		b.ns.ip("-6", "route", "add", "default", "via", backendLink6(i, 1).String())
		udp := []netip.AddrPort{netip.AddrPortFrom(b.addr4, backendPort), netip.AddrPortFrom(b.addr6, backendPort)}
		tcpPorts := []uint16{backendPort}
		switch mode {
		case natBackends:
			l.attachPass(b.ns, beDev)
		case dsrBackends:
			b.ns.addAddr("lo", pfx(vip4, 32), pfx(vip6, 128))
			b.decap = l.attachDecap(b.ns, beDev)
			tcpPorts = append(tcpPorts, guePort)
			for _, v := range []netip.Addr{vip4, vip6} {
				udp = append(udp, netip.AddrPortFrom(v, backendPort), netip.AddrPortFrom(v, guePort))
			}
		}
		serve(t, b.ns, b.name, tcpPorts, udp)
		s.backends = append(s.backends, b)
		devs = append(devs, nodeDev)
	}
	s.fp = l.fastpath(s.node, "node", devs, cfg)
	return s
}

func pfx(a netip.Addr, bits int) netip.Prefix { return netip.PrefixFrom(a, bits) }

// backendsOf returns the site's backends of the address family of vip as
// fastpath Backends on port, weight 1, leaving out those named in skip.
func backendsOf(vip netip.Addr, port uint16, skip ...string) []fastpath.Backend {
	var out []fastpath.Backend
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("b%d", i)
		skipped := false
		for _, s := range skip {
			skipped = skipped || s == name
		}
		if skipped {
			continue
		}
		a := backendLink4(i, 2)
		if vip.Is6() {
			a = backendLink6(i, 2)
		}
		out = append(out, fastpath.Backend{Addr: a, Port: port, Weight: 1})
	}
	return out
}

// natVIPs returns the NAT entries of vip (TCP and UDP on natPort) with
// the given backends.
func natVIPs(vip netip.Addr, backends []fastpath.Backend) []fastpath.VIP {
	return []fastpath.VIP{
		{Name: "nat-tcp", Addr: vip, Port: natPort, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardNAT, Backends: backends},
		{Name: "nat-udp", Addr: vip, Port: natPort, Proto: fastpath.ProtoUDP, Forward: fastpath.ForwardNAT, Backends: backends},
	}
}

// nodeConfig is the site node's Config.Node.
func nodeConfig() fastpath.Node { return fastpath.Node{V4: node4, V6: node6} }

// nameOfID returns the name of the site backend with the given ID.
func (s *site) nameOfID(t *testing.T, id uint32) string {
	t.Helper()
	for i := 1; i <= 3; i++ {
		for _, a := range []netip.Addr{backendLink4(i, 2), backendLink6(i, 2)} {
			for _, p := range []uint16{backendPort, guePort} {
				if got, ok := s.fp.mgr.BackendID(a, p); ok && got == id {
					return fmt.Sprintf("b%d", i)
				}
			}
		}
	}
	t.Fatalf("backend ID %d is no backend of the site", id)
	return ""
}

// expectedBackend returns the name of the backend the installed Maglev
// table gives the flow, computed in Go with fastpath/flowhash: what the
// program must have picked for a flow it had not seen before.
func (s *site) expectedBackend(t *testing.T, client, vip netip.AddrPort, proto uint8) string {
	t.Helper()
	table := s.fp.mgr.Table(vip.Addr(), vip.Port(), proto)
	if table == nil {
		t.Fatalf("no Maglev table installed for %s/%d", vip, proto)
	}
	id := table.Lookup(uint64(flowhash.Hash(flowhash.Flow{
		Src: client.Addr(), Dst: vip.Addr(), SrcPort: client.Port(), DstPort: vip.Port(), Proto: proto,
	})))
	return s.nameOfID(t, id)
}

// checkFlow checks that a flow answered by backend served is tracked by
// the fast path, with that backend, and that it is the backend the Maglev
// table gives the flow.
func (s *site) checkFlow(t *testing.T, client, vip netip.AddrPort, proto uint8, served string) {
	t.Helper()
	ct, err := s.fp.lookupFlow(client, vip, proto)
	if err != nil {
		t.Errorf("flow %s → %s/%d is not in fp_conntrack: %v", client, vip, proto, err)
		return
	}
	if got := s.nameOfID(t, ct.BackendId); got != served {
		t.Errorf("flow %s → %s/%d: served by %s but tracked with %s", client, vip, proto, served, got)
	}
	if want := s.expectedBackend(t, client, vip, proto); want != served {
		t.Errorf("flow %s → %s/%d: served by %s, but the Maglev table and flowhash give %s", client, vip, proto, served, want)
	}
}

// rounds is how many messages each flow of spreadTCP and spreadUDP sends.
const rounds = 4

// spreadTCP opens n connections from the client to vip, sends rounds
// messages on each, and checks every answer of a connection comes from the
// backend that answered its first, that the fast path tracks the
// connection with that backend, and that all three backends served some.
// It returns the connections served by each backend.
func (s *site) spreadTCP(t *testing.T, vip netip.AddrPort, n int) map[string]int {
	t.Helper()
	flows := make([]*tcpFlow, n)
	served := make([]string, n)
	for i := range flows {
		flows[i] = mustDialTCP(t, s.client, netip.AddrPort{}, vip)
	}
	for round := range rounds {
		for i, f := range flows {
			name, err := f.ask(fmt.Sprintf("connection %d message %d", i, round))
			if err != nil {
				t.Fatalf("connection %d from %s: %v", i, f.local(), err)
			}
			if round == 0 {
				served[i] = name
			} else if name != served[i] {
				t.Errorf("connection %d from %s moved from %s to %s", i, f.local(), served[i], name)
			}
		}
	}
	for i, f := range flows {
		s.checkFlow(t, f.local(), vip, fastpath.ProtoTCP, served[i])
		_ = f.conn.Close()
	}
	return perBackend(t, served)
}

// spreadUDP is spreadTCP for n UDP flows (one connected socket each).
func (s *site) spreadUDP(t *testing.T, vip netip.AddrPort, n int) map[string]int {
	t.Helper()
	socks := make([]*net.UDPConn, n)
	served := make([]string, n)
	for i := range socks {
		c, err := dialUDP(s.client, netip.AddrPort{}, vip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		socks[i] = c
	}
	for round := range rounds {
		for i, c := range socks {
			name, err := askUDP(c, fmt.Sprintf("flow %d message %d", i, round), 5, 2*time.Second)
			if err != nil {
				t.Fatalf("UDP flow %d from %s: %v", i, c.LocalAddr(), err)
			}
			if round == 0 {
				served[i] = name
			} else if name != served[i] {
				t.Errorf("UDP flow %d from %s moved from %s to %s", i, c.LocalAddr(), served[i], name)
			}
		}
	}
	for i, c := range socks {
		s.checkFlow(t, c.LocalAddr().(*net.UDPAddr).AddrPort(), vip, fastpath.ProtoUDP, served[i])
		_ = c.Close()
	}
	return perBackend(t, served)
}

// perBackend counts the flows of each backend and fails the test unless
// all three served some.
func perBackend(t *testing.T, served []string) map[string]int {
	t.Helper()
	per := map[string]int{}
	for _, name := range served {
		per[name]++
	}
	for _, name := range []string{"b1", "b2", "b3"} {
		if per[name] == 0 {
			t.Errorf("backend %s served none of %d flows: %v", name, len(served), per)
		}
	}
	if len(per) != 3 {
		t.Errorf("flows served by %v, want b1, b2 and b3 only", per)
	}
	return per
}

// waitFor polls cond until it holds, failing the test after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends an ICMP or ICMPv6 echo request from namespace n to dst and
// waits for the matching reply.
func ping(n *netNS, dst netip.Addr, seq int) error {
	network, laddr, proto := "ip4:icmp", "0.0.0.0", 1
	var typ icmp.Type = ipv4.ICMPTypeEcho
	var reply icmp.Type = ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		// The kernel computes the checksum of raw ICMPv6 sockets.
		network, laddr, proto = "ip6:ipv6-icmp", "::", 58
		typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var c *icmp.PacketConn
	if err := n.do(func() error {
		var err error
		c, err = icmp.ListenPacket(network, laddr)
		return err
	}); err != nil {
		return fmt.Errorf("icmp socket: %w", err)
	}
	defer func() { _ = c.Close() }()
	id := os.Getpid() & 0xffff
	req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("novaedge e2e")}}).Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("send echo request to %s: %w", dst, err)
	}
	if err := c.SetReadDeadline(time.Now().Add(patience)); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		nr, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("echo reply from %s: %w", dst, err)
		}
		m, err := icmp.ParseMessage(proto, buf[:nr])
		if err != nil || m.Type != reply {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq && from.String() == dst.String() {
			return nil
		}
	}
}
