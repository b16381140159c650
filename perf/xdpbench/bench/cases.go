package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	benchbpf "github.com/novaedge/novaedge/gen/bpf/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
)

// Setup prepares the node for a case: it attaches programs to, or installs
// rules for, interface ifname in namespace nodeNS so that frames to
// topo.VIP:topo.Port (UDP and TCP) leave the same interface towards
// topo.Backend:topo.Port, and returns a cleanup that undoes everything it
// did. The node has a permanent neighbour entry for topo.Backend, so a FIB
// lookup resolves its MAC; the generator's veth runs a native XDP program,
// so native XDP_TX and redirects into it deliver.
type Setup func(ctx context.Context, nodeNS, ifname string) (cleanup func(), err error)

// Case is one way of forwarding measured by the benchmark.
type Case struct {
	// Name identifies the case in flags and reports.
	Name string
	// Doc says in a few words what the node does.
	Doc string
	// Expect is the destination of the frames that count as forwarded:
	// topo.Backend for anything that load-balances, topo.VIP for a program
	// that only turns frames around.
	Expect netip.Addr
	// Setup prepares the node; nil means the case is not wired yet and is
	// reported as such instead of measured.
	Setup Setup
}

// Names of the reference cases, which ratios are computed against, and of
// the case they judge.
const (
	CaseTxMin    = "xdp-tx-min"
	CaseNftables = "nftables"
	CaseNovaEdge = "novaedge"
)

// The NovaEdge fast path's goals, as ratios to the reference cases.
const (
	GoalVsTxMin    = 0.8
	GoalVsNftables = 5.0
)

// novaEdge is the NovaEdge fast path's Setup, nil until it is wired in.
// Wiring it in means assigning a function here (or in a file of its own)
// that loads the fast-path program, applies a configuration with the
// service topo.VIP:topo.Port for UDP and for TCP, forwarded in NAT mode to
// the one backend topo.Backend:topo.Port (SNAT source, where the mode wants
// one: topo.NodeAddr), attaches the program with topo.AttachXDP(nodeNS,
// ifname, prog, link.XDPDriverMode) and returns a cleanup closing the link
// and the objects. A mode that keeps the VIP as the destination (DSR) needs
// its Case.Expect set to topo.VIP instead. The node namespace forwards
// (net.ipv4.ip_forward=1) and holds a permanent neighbour entry for the
// backend, so bpf_fib_lookup resolves it.
var novaEdge Setup

// Cases returns the registered cases in the order they are measured.
func Cases() []Case {
	return []Case{
		{Name: "xdp-tx", Expect: topo.VIP, Setup: nodeProgram(benchbpf.BenchnodeProgBenchNodeTx),
			Doc: "XDP: swap MACs, XDP_TX (frames return still addressed to the VIP)"},
		{Name: CaseTxMin, Expect: topo.Backend, Setup: nodeProgram(benchbpf.BenchnodeProgBenchNodeTxMin),
			Doc: "XDP: parse, match VIP:port, rewrite destination to the backend with IPv4 and L4 checksums, swap MACs, XDP_TX"},
		{Name: CaseNftables, Expect: topo.Backend, Setup: nftablesDNAT,
			Doc: "kernel forwarding with an nftables DNAT rule (conntrack); XDP_PASS on the veth"},
		{Name: CaseNovaEdge, Expect: topo.Backend, Setup: novaEdge,
			Doc: "the NovaEdge XDP fast path"},
	}
}

// SelectCases returns the cases named in names, in registry order.
func SelectCases(names []string) ([]Case, error) {
	all := Cases()
	var out []Case
	for _, n := range names {
		found := false
		for _, c := range all {
			if c.Name == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown case %q", n)
		}
	}
	for _, c := range all {
		for _, n := range names {
			if c.Name == n {
				out = append(out, c)
				break
			}
		}
	}
	return out, nil
}

// nodeProgram returns a Setup that attaches the reference node program
// prog, with the service compiled in as constants.
func nodeProgram(prog string) Setup {
	return func(ctx context.Context, nodeNS, ifname string) (func(), error) {
		objs, l, err := attachNode(nodeNS, ifname, prog)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Close(); objs.Close() }, nil
	}
}

func attachNode(nodeNS, ifname, prog string) (*ebpf.Collection, link.Link, error) {
	coll, err := loadNode()
	if err != nil {
		return nil, nil, err
	}
	l, err := topo.AttachXDP(nodeNS, ifname, coll.Programs[prog], link.XDPDriverMode)
	if err != nil {
		coll.Close()
		return nil, nil, err
	}
	return coll, l, nil
}

// loadNode loads the reference node programs with the service (topo.VIP,
// topo.Port, topo.Backend) set as constants.
func loadNode() (*ebpf.Collection, error) {
	spec, err := benchbpf.LoadBenchnode()
	if err != nil {
		return nil, fmt.Errorf("load node programs: %w", err)
	}
	vip, backend := topo.VIP.As4(), topo.Backend.As4()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], topo.Port)
	// The program compares network byte order as it lies in memory.
	for name, v := range map[string]any{
		"node_vip":     binary.NativeEndian.Uint32(vip[:]),
		"node_backend": binary.NativeEndian.Uint32(backend[:]),
		"node_port":    binary.NativeEndian.Uint16(port[:]),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load node programs: %w", err)
	}
	return coll, nil
}

// nftTable is the nftables table of the nftables case, in the node
// namespace (which only this run uses).
const nftTable = "xdpbench"

// nftablesDNAT forwards in the kernel: an nftables DNAT rule in prerouting
// sends VIP:port to the backend, conntrack keeps the translation, the FIB
// forwards. The veth gets an XDP_PASS program because the generator's native
// XDP_TX only delivers into a veth whose peer runs XDP.
func nftablesDNAT(ctx context.Context, nodeNS, ifname string) (func(), error) {
	objs, l, err := attachNode(nodeNS, ifname, benchbpf.BenchnodeProgBenchNodePass)
	if err != nil {
		return nil, err
	}
	detach := func() { _ = l.Close(); objs.Close() }
	rules := fmt.Sprintf(`table ip %[1]s {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[2]s udp dport %[3]d dnat to %[4]s
		ip daddr %[2]s tcp dport %[3]d dnat to %[4]s
	}
}
`, nftTable, topo.VIP, topo.Port, topo.Backend)
	if err := nft(ctx, nodeNS, rules, "-f", "-"); err != nil {
		detach()
		return nil, err
	}
	return func() {
		_ = nft(context.Background(), nodeNS, "", "delete", "table", "ip", nftTable)
		detach()
	}, nil
}

func nft(ctx context.Context, ns, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft %s in %s: %w: %s", strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// StatusNotWired is the status of a case without a Setup.
const StatusNotWired = "not yet wired"
