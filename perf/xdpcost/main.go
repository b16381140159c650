// Command xdpcost measures what the XDP fast path costs per packet, from
// BPF_PROG_TEST_RUN with a large repeat count, beside a trivial program that
// only returns XDP_TX, in the same run:
//
//   - trivial: return XDP_TX (the floor of running any XDP program here);
//   - ct-hit: a packet of a tracked flow to a DSR-L2 VIP: parse, VIP lookup,
//     conntrack hit, backend lookup, FIB lookup, MAC rewrite, XDP_TX. L2 DSR
//     rewrites only the MACs, so the repeated runs (which reuse the rewritten
//     buffer) stay on the hit path;
//   - miss: a packet to a NAT VIP with the program loaded with its benchmark
//     switch (bench_miss_path), which keeps no state and rewrites nothing, so
//     every run misses conntrack and hashes into the Maglev table.
//
// Each case runs in a network namespace of its own making with a veth and a
// permanent neighbour entry, so bpf_fib_lookup succeeds as on a real node.
// The time per packet is the wall time of the run divided by the repeat
// count (one syscall per round: its cost spread over millions of runs is
// negligible); the median of several rounds is reported with the ratio to
// the trivial program. Writes Markdown to -out. Needs root.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/novaedge/novaedge/fastpath"
)

var (
	vip     = netip.MustParseAddr("10.90.2.10")
	backend = netip.MustParseAddr("10.90.0.2")
	client  = netip.MustParseAddr("10.90.1.2")
	nodeV4  = netip.MustParseAddr("10.90.0.1")
)

type result struct {
	name    string
	ns      []float64
	verdict uint32
	check   string
}

func main() {
	out := flag.String("out", "perf/results", "directory for the report")
	repeat := flag.Int("repeat", 2_000_000, "program runs per round")
	rounds := flag.Int("rounds", 7, "rounds per case (the median is reported)")
	flag.Parse()
	log.SetFlags(0)

	// Everything below runs on this thread, inside a new network namespace.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		log.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		log.Fatalf("create network namespace: %v", err)
	}
	defer func() {
		_ = netns.Set(orig)
		_ = ns.Close()
	}()
	ifindex, mac, err := setup()
	if err != nil {
		log.Fatal(err)
	}

	pkt := packet(mac)
	var results []result

	trivial, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "trivial_tx", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 3), asm.Return()},
	})
	if err != nil {
		log.Fatal(err)
	}
	results = append(results, measure("trivial XDP_TX", trivial, pkt, ifindex, *repeat, *rounds, func() string { return "" }))
	_ = trivial.Close()

	for _, c := range []struct {
		name    string
		miss    bool
		forward fastpath.Forward
		// port of the VIP entry; another port than the packet's makes the
		// packet non-VIP traffic.
		port uint16
		want string
	}{
		{"fast path, conntrack hit (DSR L2)", false, fastpath.ForwardDSRL2, 80, "ct_hit"},
		{"fast path, conntrack miss + Maglev (NAT, benchmark switch)", true, fastpath.ForwardNAT, 80, "ct_miss"},
		{"fast path, not a VIP: to the kernel (the cost for other traffic)", false, fastpath.ForwardDSRL2, 81, "pass_not_vip"},
	} {
		objs, err := fastpath.Load(fastpath.LoadOptions{BenchMissPath: c.miss})
		if err != nil {
			log.Fatal(err)
		}
		m, err := fastpath.NewManager(objs, fastpath.ManagerOptions{})
		if err != nil {
			log.Fatal(err)
		}
		cfg := fastpath.Config{
			Node: fastpath.Node{V4: nodeV4},
			VIPs: []fastpath.VIP{{Name: "bench", Addr: vip, Port: c.port, Proto: fastpath.ProtoTCP, Forward: c.forward,
				Backends: []fastpath.Backend{{Addr: backend, Port: 80, Weight: 1}}}},
		}
		if _, err := m.Apply(cfg); err != nil {
			log.Fatal(err)
		}
		before, err := fastpath.ReadCounters(objs.FpCounters)
		if err != nil {
			log.Fatal(err)
		}
		r := measure(c.name, objs.NovaedgeFastpath, pkt, ifindex, *repeat, *rounds, func() string {
			after, err := fastpath.ReadCounters(objs.FpCounters)
			if err != nil {
				return err.Error()
			}
			want := c.want
			runs := after["rx"] - before["rx"]
			if got := after[want] - before[want]; got+1 < runs {
				return fmt.Sprintf("only %d of %d runs took the %s path: %v", got, runs, want, after)
			}
			if tx := after["tx"] - before["tx"]; tx < runs && want != "pass_not_vip" {
				return fmt.Sprintf("only %d of %d runs ended in XDP_TX: %v", tx, runs, after)
			}
			return ""
		})
		results = append(results, r)
		_ = objs.Close()
	}

	report := render(results, *repeat, *rounds)
	fmt.Print(report)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(*out, "xdp-cost-"+time.Now().UTC().Format("2006-01-02T150405Z")+".md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", path)
	for _, r := range results {
		if r.check != "" {
			log.Fatalf("%s: the program did not take the measured path: %s", r.name, r.check)
		}
	}
}

// setup makes a veth pair with the node's address and a permanent
// neighbour entry for the backend, and turns forwarding on.
func setup() (int, net.HardwareAddr, error) {
	la := netlink.NewLinkAttrs()
	la.Name = "xc0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "xc1"}); err != nil {
		return 0, nil, fmt.Errorf("create veth: %w", err)
	}
	var link netlink.Link
	for _, name := range []string{"lo", "xc1", "xc0"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return 0, nil, err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return 0, nil, err
		}
		link = l
	}
	addr, _ := netlink.ParseAddr(nodeV4.String() + "/24")
	if err := netlink.AddrAdd(link, addr); err != nil {
		return 0, nil, err
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(backend.AsSlice()), HardwareAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 2}}); err != nil {
		return 0, nil, fmt.Errorf("neighbour: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return 0, nil, err
	}
	return link.Attrs().Index, link.Attrs().HardwareAddr, nil
}

// packet is a TCP ACK from the client to VIP:80 (mid-flow: no SYN), 64
// bytes of frame.
func packet(dst net.HardwareAddr) []byte {
	b := make([]byte, 14+20+20+10)
	copy(b[0:6], dst)
	copy(b[6:12], []byte{0x02, 0, 0, 0, 0, 9})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	ip[8] = 64
	ip[9] = 6
	copy(ip[12:16], client.AsSlice())
	copy(ip[16:20], vip.AsSlice())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	tcp := b[34:54]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 5 << 4
	tcp[13] = 0x10 // ACK
	return b
}

func measure(name string, prog *ebpf.Program, pkt []byte, ifindex, repeat, rounds int, check func() string) result {
	ctx := make([]byte, 24) // struct xdp_md: data, data_end, data_meta, ingress_ifindex, ...
	binary.LittleEndian.PutUint32(ctx[4:], uint32(len(pkt)))
	binary.LittleEndian.PutUint32(ctx[12:], uint32(ifindex))
	r := result{name: name}
	for i := 0; i < rounds; i++ {
		data := slices.Clone(pkt)
		opts := &ebpf.RunOptions{Data: data, Context: ctx, Repeat: uint32(repeat)}
		start := time.Now()
		v, err := prog.Run(opts)
		elapsed := time.Since(start)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		r.verdict = v
		r.ns = append(r.ns, float64(elapsed.Nanoseconds())/float64(repeat))
	}
	r.check = check()
	return r
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func render(rs []result, repeat, rounds int) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# XDP fast path: cost per packet (BPF_PROG_TEST_RUN)\n\n")
	fmt.Fprintf(&b, "%s, host %s, %d CPUs, %s; %d rounds of %d runs per case, median.\n\n",
		time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), kernelRelease(), rounds, repeat)
	fmt.Fprintf(&b, "| case | ns/packet (median) | min | max | × trivial | verdict |\n|---|---:|---:|---:|---:|---|\n")
	base := median(rs[0].ns)
	for _, r := range rs {
		m := median(r.ns)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.2f | %s |\n", r.name, m, slices.Min(r.ns), slices.Max(r.ns), m/base, verdictName(r.verdict))
	}
	fmt.Fprintf(&b, "\nTarget: ≤ 80 ns on the conntrack-hit path (Katran's published test-run cost is 101–119 ns per packet).\n")
	for _, r := range rs {
		if r.check != "" {
			fmt.Fprintf(&b, "\nWARNING: %s did not take the measured path: %s\n", r.name, r.check)
		}
	}
	return b.String()
}

func verdictName(v uint32) string {
	names := []string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprint(v)
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "kernel ?"
	}
	return "Linux " + strings.TrimSpace(string(b))
}
