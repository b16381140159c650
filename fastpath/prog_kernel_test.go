package fastpath

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestProgPassedFramesReachBackend attaches the program (generic XDP) to a
// node between a client and a backend and checks the claim of send(): a
// frame the program has already rewritten and then hands to the kernel
// (no neighbour entry yet, or an egress interface without the fast path)
// is forwarded by the kernel. A DSR frame's outer source is the node's own
// address, and IPv4 drops a received packet with a local source address as
// a martian (fib_validate_source) unless accept_local is set on the
// ingress interface; the agent sets it on the interfaces it attaches to
// (datapath.PrepareInterfaces), and so does this test.
func TestProgPassedFramesReachBackend(t *testing.T) {
	for _, tc := range []struct {
		name      string
		neighbour bool // a permanent neighbour entry for the backend on the node
		counter   string
	}{
		{"no neighbour entry", false, "PASS_NO_NEIGH"},
		{"egress without XDP", true, "PASS_EGRESS_NO_XDP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, node, backend := newBareNet(t), newBareNet(t), newBareNet(t)
			vethBetween(t, node, "fpk-n0", "10.20.0.1/24", client, "fpk-c0", "10.20.0.2/24")
			vethBetween(t, node, "fpk-n1", "10.21.0.1/24", backend, "fpk-b0", "10.21.0.2/24")
			if err := client.h.RouteAdd(&netlink.Route{Dst: progIPNet("203.0.113.0/24"), Gw: net.IPv4(10, 20, 0, 1)}); err != nil {
				t.Fatal(err)
			}
			// As datapath.PrepareInterfaces sets them on attached interfaces.
			sysctls := map[string]string{
				"net/ipv4/ip_forward":               "1",
				"net/ipv4/conf/fpk-n0/accept_local": "1",
				"net/ipv4/conf/fpk-n0/rp_filter":    "2",
			}
			var err error
			node.do(func() {
				for k, v := range sysctls {
					if err = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
						return
					}
				}
			})
			if err != nil {
				t.Fatalf("sysctl: %v", err)
			}
			beAddr := netip.MustParseAddr("10.21.0.2")
			if tc.neighbour {
				b0, err := backend.h.LinkByName("fpk-b0")
				if err != nil {
					t.Fatal(err)
				}
				if err := node.h.NeighSet(&netlink.Neigh{
					LinkIndex: node.ifindex["fpk-n1"], Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
					IP: beAddr.AsSlice(), HardwareAddr: b0.Attrs().HardwareAddr,
				}); err != nil {
					t.Fatal(err)
				}
			}

			e := newProgEnv(t, node, progSmallTables)
			cfg := progDefaultConfig()
			cfg.NodeV4 = [4]byte{10, 20, 0, 1}
			e.setConfig(cfg)
			e.addFastVIP(progVIP{addr: progVIP4, port: 53, proto: ipUDP, id: 1, forward: fwdDSRIPIP}, netip.AddrPortFrom(beAddr, 53))
			n0, err := node.h.LinkByName("fpk-n0")
			if err != nil {
				t.Fatal(err)
			}
			// The package-level call acts in the calling thread's namespace.
			node.do(func() { err = netlink.LinkSetXdpFdWithFlags(n0, e.objs.NovaedgeFastpath.FD(), nl.XDP_FLAGS_SKB_MODE) })
			if err != nil {
				t.Fatalf("attach XDP (generic) to fpk-n0: %v", err)
			}

			rxBefore, martiansBefore := ipInReceives(t, backend), martianSources(t, node)
			// The node's kernel may first have to resolve the client: send
			// a few datagrams, one at a time, until one reached the program.
			deadline := time.Now().Add(5 * time.Second)
			for e.counters()[cRX] == 0 || ipInReceives(t, backend) == rxBefore {
				if time.Now().After(deadline) {
					break
				}
				sendUDP(t, client, "203.0.113.10:53")
				time.Sleep(100 * time.Millisecond)
			}
			got := e.counters()
			if got[fpbpfCounter(tc.counter)] == 0 {
				t.Fatalf("the program never took the %s path: counters %s", tc.counter, fmtCounters(got))
			}
			if ipInReceives(t, backend) == rxBefore {
				t.Errorf("%d frames handed to the node's kernel (%s), none reached the backend; meanwhile the kernel's (host-wide) martian source count rose by %d",
					got[fpbpfCounter(tc.counter)], tc.counter, martianSources(t, node)-martiansBefore)
			}
		})
	}
}

func fpbpfCounter(name string) fpbpf.FastpathFpCounter {
	for i, n := range progCounterNames {
		if n == name {
			return fpbpf.FastpathFpCounter(i)
		}
	}
	panic("no counter " + name)
}

// vethBetween joins namespaces a and b with a veth, addressed.
func vethBetween(t *testing.T, a *progNet, nameA, addrA string, b *progNet, nameB, addrB string) {
	t.Helper()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: nameA, NumTxQueues: 1, NumRxQueues: 1},
		PeerName:  nameB, PeerNamespace: netlink.NsFd(b.ns),
	}
	if err := a.h.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s/%s: %v", nameA, nameB, err)
	}
	for _, end := range []struct {
		n    *progNet
		name string
		addr string
	}{{a, nameA, addrA}, {b, nameB, addrB}} {
		l, err := end.n.h.LinkByName(end.name)
		if err != nil {
			t.Fatal(err)
		}
		end.n.ifindex[end.name] = l.Attrs().Index
		if err := end.n.h.AddrAdd(l, &netlink.Addr{IPNet: progIPNet(end.addr)}); err != nil {
			t.Fatalf("address %s on %s: %v", end.addr, end.name, err)
		}
		if err := end.n.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}

// ipInReceives is the IPv4 InReceives counter of n: IPv4 packets only,
// not the IPv6 neighbour discovery and MLD a new link sends on its own.
func ipInReceives(t *testing.T, n *progNet) uint64 {
	t.Helper()
	var b []byte
	var err error
	// thread-self: /proc/self/net would show the process's namespace.
	n.do(func() { b, err = os.ReadFile("/proc/thread-self/net/snmp") })
	if err != nil {
		t.Fatal(err)
	}
	var names, values []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "Ip:" {
			if names == nil {
				names = f
			} else {
				values = f
			}
		}
	}
	for i, name := range names {
		if name == "InReceives" && i < len(values) {
			v, err := strconv.ParseUint(values[i], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no Ip InReceives in /proc/net/snmp:\n%s", b)
	return 0
}

// sendUDP sends one datagram from inside n.
func sendUDP(t *testing.T, n *progNet, to string) {
	t.Helper()
	var err error
	n.do(func() {
		var c net.Conn
		if c, err = net.Dial("udp4", to); err != nil {
			return
		}
		_, err = c.Write([]byte("through the fast path"))
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	})
	if err != nil {
		t.Fatal(fmt.Errorf("send from the client: %w", err))
	}
}

// martianSources is the in_martian_src count of the routing statistics,
// which the kernel keeps per CPU for all namespaces together.
func martianSources(t *testing.T, n *progNet) uint64 {
	t.Helper()
	var b []byte
	var err error
	n.do(func() { b, err = os.ReadFile("/proc/thread-self/net/stat/rt_cache") })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	col := slices.Index(strings.Fields(lines[0]), "in_martian_src")
	var sum uint64
	for _, line := range lines[1:] {
		if f := strings.Fields(line); col >= 0 && col < len(f) {
			v, _ := strconv.ParseUint(f[col], 16, 64)
			sum += v
		}
	}
	return sum
}
