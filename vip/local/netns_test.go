package local

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testNS is a network namespace of one test, with a netlink handle inside it
// and its lo up. The host's own interfaces are never touched.
type testNS struct {
	ns netns.NsHandle
	h  *netlink.Handle
}

// requireRoot fails (never skips) the test when not root: these tests are
// the only check that the package works against a real kernel, and a skip
// would let a CI without privileges pass them silently.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it creates network namespaces and binds addresses in them (run go test as root)")
	}
}

// newTestNS creates an unnamed network namespace for t. Unnamed, it lives only
// as long as something refers to it (the handle below, the netlink sockets,
// sockets opened inside it), so closing them in t.Cleanup deletes it, and a
// test binary that dies cannot leave one behind in /run/netns.
func newTestNS(t *testing.T) *testNS {
	t.Helper()
	requireRoot(t)
	var ns netns.NsHandle
	if err := onThrowawayThread(func() error {
		var err error
		ns, err = netns.New() // unshare: moves this thread into the new namespace
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
		t.Fatalf("find lo in test namespace: %v", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatalf("bring lo up in test namespace: %v", err)
	}
	return &testNS{ns: ns, h: h}
}

// run calls f on an OS thread that is inside the test namespace. Sockets
// created by f stay in the namespace after f returns.
func (n *testNS) run(f func() error) error {
	return onThrowawayThread(func() error {
		if err := netns.Set(n.ns); err != nil {
			return fmt.Errorf("enter test namespace: %w", err)
		}
		return f()
	})
}

// onThrowawayThread runs f on a goroutine locked to its OS thread and never
// unlocked: when the goroutine ends the runtime ends the thread too, instead
// of handing a thread whose namespace f changed to other goroutines. That is
// safer than switching back, which can fail halfway.
func onThrowawayThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- f()
	}()
	return <-done
}

// addrsOn returns the addresses on iface in the test namespace, leaving out
// the ones the kernel configures by itself (127.0.0.1/8, ::1/128, link-local),
// as sorted prefix strings.
func (n *testNS) addrsOn(t *testing.T, iface string) []string {
	t.Helper()
	var out []string
	for _, a := range n.addrList(t, iface) {
		p := addrPrefix(t, a)
		if p.String() == "127.0.0.1/8" || p.String() == "::1/128" || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, p.String())
	}
	slices.Sort(out)
	return out
}

func (n *testNS) addrList(t *testing.T, iface string) []netlink.Addr {
	t.Helper()
	link, err := n.h.LinkByName(iface)
	if err != nil {
		t.Fatalf("find %s in test namespace: %v", iface, err)
	}
	list, err := n.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("list addresses of %s: %v", iface, err)
	}
	return list
}

// addAddr binds prefix on iface behind the manager's back, as an admin would.
func (n *testNS) addAddr(t *testing.T, iface, prefix string, flags int) {
	t.Helper()
	link, err := n.h.LinkByName(iface)
	if err != nil {
		t.Fatalf("find %s in test namespace: %v", iface, err)
	}
	if err := n.h.AddrAdd(link, &netlink.Addr{IPNet: ipNet(netip.MustParsePrefix(prefix)), Flags: flags}); err != nil {
		t.Fatalf("add %s on %s: %v", prefix, iface, err)
	}
}

func (n *testNS) delAddr(t *testing.T, iface, prefix string) {
	t.Helper()
	link, err := n.h.LinkByName(iface)
	if err != nil {
		t.Fatalf("find %s in test namespace: %v", iface, err)
	}
	if err := n.h.AddrDel(link, &netlink.Addr{IPNet: ipNet(netip.MustParsePrefix(prefix))}); err != nil {
		t.Fatalf("delete %s from %s: %v", prefix, iface, err)
	}
}

func addrPrefix(t *testing.T, a netlink.Addr) netip.Prefix {
	t.Helper()
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		t.Fatalf("bad address from netlink: %v", a.IP)
	}
	bits, _ := a.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), bits)
}

// addr is ParseAddress for test tables, where a bad literal is a bug in the
// test itself.
func addr(s, iface string) Address {
	a, err := ParseAddress(s, iface)
	if err != nil {
		panic(err)
	}
	return a
}
