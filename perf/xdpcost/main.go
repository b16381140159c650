// Command xdpcost measures what the XDP fast path costs per packet, from
// BPF_PROG_TEST_RUN with a large repeat count, beside a trivial program that
// only returns XDP_TX, in the same run:
//
//   - trivial: return XDP_TX (the floor of running any XDP program here);
//   - ct-hit: a packet of a tracked flow to a DSR-L2 VIP: parse, the
//     flow's copy in the flow cache (made by the
//     first conntrack hit, the second run; it spares the conntrack lookup),
//     backend lookup, cached next hop, MAC rewrite, XDP_TX. L2 DSR rewrites
//     only the MACs, so the repeated runs (which reuse the rewritten buffer)
//     stay on the hit path;
//   - ct-hit over 65536 flows: the same, but the benchmark switch
//     bench_flows makes run n a packet of flow n % 65536 (perf/xdpbench's
//     flow count), so the flow cache and conntrack reach a working set of
//     that size instead of one entry that always sits in the CPU cache
//     (flows whose flow cache slot another flow took go to conntrack);
//   - miss: a packet to a NAT VIP with the program loaded with its benchmark
//     switch (bench_miss_path), which keeps no state and rewrites nothing, so
//     every run misses conntrack and hashes into the Maglev table;
//   - new flow: every run a new flow (bench_flows) to a VIP that NATs
//     keeping the client address: conntrack miss, Maglev, and the state a
//     new flow costs, a conntrack entry and a NAT reply mapping (with LRU
//     eviction once the tables are full); only the packet rewrite is
//     skipped, as repeated runs reuse the buffer;
//   - not a VIP: a packet to a port no VIP entry has, which the prefilter
//     hands to the kernel; once with only a DSR VIP, and once with a NAT VIP
//     configured, where such a packet is also looked up as a possible reply
//     of a NAT flow (fp_nat).
//
// Each case runs in a network namespace of its own making with a veth and a
// permanent neighbour entry, so bpf_fib_lookup succeeds as on a real node.
// Two times per packet are reported for each round, and their medians over
// the rounds with the ratio to the trivial program:
//
//   - kernel: the mean run time BPF_PROG_TEST_RUN itself reports (whole
//     nanoseconds). The kernel stops its clock while the thread yields the
//     CPU, so other load on a shared machine hardly moves it; it is what
//     Katran's published test-run figures are;
//   - wall: the wall time of the syscall divided by the repeat count, which
//     includes the time other tasks held the CPU.
//
// Writes Markdown to -out. Needs root.
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
	"github.com/novaedge/novaedge/perf/internal/progrun"
)

var (
	vip     = netip.MustParseAddr("10.90.2.10")
	backend = netip.MustParseAddr("10.90.0.2")
	client  = netip.MustParseAddr("10.90.1.2")
	nodeV4  = netip.MustParseAddr("10.90.0.1")
)

// newFlows as BenchFlows makes every run a new flow.
const newFlows = ^uint32(0)

type result struct {
	name    string
	kernel  []float64
	ns      []float64
	verdict uint32
	check   string
}

func main() {
	out := flag.String("out", "perf/results", "directory for the report")
	repeat := flag.Int("repeat", 2_000_000, "program runs per round")
	rounds := flag.Int("rounds", 7, "rounds per case (the median is reported)")
	only := flag.String("only", "", "run only the fast path cases whose name contains this (for profiling one path)")
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
		// flows is the benchmark's BenchFlows: 0 runs the one packet's
		// flow, n cycles through n flows, newFlows makes each run a new one.
		flows uint32
		// want is the counter every run must add to, except slack runs
		// (the first packets of the flows).
		want  string
		slack uint64
	}{
		{"fast path, conntrack hit (DSR L2)", false, fastpath.ForwardDSRL2, 80, 0, "ct_hit", 1},
		{"fast path, conntrack hit over 65536 flows (DSR L2)", false, fastpath.ForwardDSRL2, 80, 65536, "ct_hit", 65536},
		{"fast path, conntrack miss + Maglev (NAT, benchmark switch)", true, fastpath.ForwardNAT, 80, 0, "ct_miss", 1},
		{"fast path, new flow per run: miss + Maglev + conntrack and NAT inserts (NAT keeping the client)", false, fastpath.ForwardNATKeepClient, 80, newFlows, "ct_created", 0},
		{"fast path, not a VIP: to the kernel (the cost for other traffic)", false, fastpath.ForwardDSRL2, 81, 0, "pass_not_vip", 1},
		{"fast path, not a VIP while a VIP uses NAT (other traffic is looked up as a NAT reply)", false, fastpath.ForwardNAT, 81, 0, "pass_not_vip", 1},
	} {
		if !strings.Contains(c.name, *only) {
			continue
		}
		objs, err := fastpath.Load(fastpath.LoadOptions{BenchMissPath: c.miss, BenchFlows: c.flows})
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
		before, err := objs.Counters()
		if err != nil {
			log.Fatal(err)
		}
		r := measure(c.name, objs.NovaedgeFastpath, pkt, ifindex, *repeat, *rounds, func() string {
			after, err := objs.Counters()
			if err != nil {
				return err.Error()
			}
			want := c.want
			runs := after["rx"] - before["rx"]
			if got := after[want] - before[want]; got+c.slack < runs {
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
		v, kernel, wall, err := testRun(prog, data, ctx, uint32(repeat))
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		r.verdict = v
		r.kernel = append(r.kernel, kernel)
		r.ns = append(r.ns, wall)
	}
	r.check = check()
	return r
}

// testRun runs prog repeat times on data and returns its verdict, the
// kernel's mean time per run and the wall time per run, in nanoseconds.
func testRun(prog *ebpf.Program, data, ctx []byte, repeat uint32) (uint32, float64, float64, error) {
	start := time.Now()
	verdict, ns, err := progrun.Run(prog.FD(), data, ctx, repeat)
	wall := float64(time.Since(start).Nanoseconds()) / float64(repeat)
	return verdict, float64(ns), wall, err
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
	fmt.Fprintf(&b, "- **kernel**: the mean ns per run BPF_PROG_TEST_RUN reports; the kernel stops its clock while the thread yields the CPU, so other load hardly moves it.\n")
	fmt.Fprintf(&b, "- **wall**: the syscall's wall time per run, including time other tasks held the CPU (load average %s).\n\n", loadAvg())
	fmt.Fprintf(&b, "| case | kernel ns (median) | min | max | × trivial | − trivial | wall ns (median) | min | max | × trivial | verdict |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	kbase, base := median(rs[0].kernel), median(rs[0].ns)
	for _, r := range rs {
		k, m := median(r.kernel), median(r.ns)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %.0f | %.1f | %.1f | %.1f | %.2f | %s |\n", r.name,
			k, slices.Min(r.kernel), slices.Max(r.kernel), k/kbase, k-kbase,
			m, slices.Min(r.ns), slices.Max(r.ns), m/base, verdictName(r.verdict))
	}
	fmt.Fprintf(&b, "\nTarget: ≤ 80 ns on the conntrack-hit path (Katran's published test-run cost, the kernel's figure, is 101–119 ns per packet).\n")
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

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "kernel ?"
	}
	return "Linux " + strings.TrimSpace(string(b))
}
