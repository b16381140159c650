package topo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
)

// The addresses of the benchmark network. Clients (ClientBase and up) and
// the backend sit in the gen namespace; the node owns NodeAddr and forwards
// VIP:Port, for UDP and TCP alike, to Backend:Port.
var (
	// NodeAddr is the node's address on the veth (NodeAddr/24).
	NodeAddr = netip.MustParseAddr("10.77.0.1")
	// Backend is the backend's address on the gen side of the veth
	// (Backend/24); the node has a permanent neighbour entry for it.
	Backend = netip.MustParseAddr("10.77.0.2")
	// VIP is the service address, routed via NodeAddr in the gen namespace.
	VIP = netip.MustParseAddr("10.77.1.1")
	// ClientBase is the first client address (ClientBase/16 in the gen
	// namespace); the node routes it back via Backend.
	ClientBase = netip.MustParseAddr("10.78.0.1")
)

// Port is the service port on the VIP and on the backend (no port mapping).
const Port = 8080

// Topology is a built benchmark network. Its fields are read-only.
type Topology struct {
	// GenNS and NodeNS are the names of the namespaces (ip netns).
	GenNS, NodeNS string
	// GenIf and NodeIf are the veth ends in GenNS and NodeNS.
	GenIf, NodeIf string
	// GenIndex and NodeIndex are the ifindexes of GenIf and NodeIf, each
	// valid in its own namespace.
	GenIndex, NodeIndex int
	// GenMAC and NodeMAC are the veth ends' MAC addresses.
	GenMAC, NodeMAC net.HardwareAddr

	log *slog.Logger
}

// Build creates the namespaces prefix+"gen" and prefix+"node" and the veth
// pair between them, and configures addresses, routes, static neighbours,
// sysctls and offloads. The veth ends are named prefix+"g" and prefix+"n",
// so the prefix is at most 14 bytes long (interface names have 15). On
// error, everything already created is removed. A nil log discards
// messages.
func Build(ctx context.Context, prefix string, log *slog.Logger) (_ *Topology, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(prefix) > 14 {
		return nil, fmt.Errorf("prefix %q is longer than 14 bytes", prefix)
	}
	t := &Topology{
		GenNS: prefix + "gen", NodeNS: prefix + "node",
		GenIf: prefix + "g", NodeIf: prefix + "n",
		log: log,
	}
	for _, ns := range []string{t.GenNS, t.NodeNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			return nil, fmt.Errorf("namespace %s exists already (another run, or a killed one: ip netns del %s)", ns, ns)
		}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	// One queue pair per CPU: veth hands a frame sent on CPU n to the
	// peer's queue n, so each CPU's frames are received, forwarded and sunk
	// by NAPI on that same CPU, without contention for one queue.
	q := strconv.Itoa(runtime.NumCPU())
	g, n := []string{"-n", t.GenNS}, []string{"-n", t.NodeNS}
	for _, args := range [][]string{
		{"netns", "add", t.GenNS},
		{"netns", "add", t.NodeNS},
		{"link", "add", t.GenIf, "netns", t.GenNS, "numtxqueues", q, "numrxqueues", q, "type", "veth",
			"peer", "name", t.NodeIf, "netns", t.NodeNS, "numtxqueues", q, "numrxqueues", q},
	} {
		if _, err := ipCmd(ctx, args...); err != nil {
			return nil, err
		}
	}
	if t.GenIndex, t.GenMAC, err = linkInfo(t.GenNS, t.GenIf); err != nil {
		return nil, err
	}
	if t.NodeIndex, t.NodeMAC, err = linkInfo(t.NodeNS, t.NodeIf); err != nil {
		return nil, err
	}
	for _, ns := range []string{t.GenNS, t.NodeNS} {
		// IPv6 off before the links come up: no DAD, RS or MLD frames.
		if _, err := t.Exec(ctx, ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			return nil, err
		}
	}
	for _, args := range [][]string{
		cat(g, "link", "set", "lo", "up"),
		cat(g, "link", "set", t.GenIf, "up"),
		cat(g, "addr", "add", Backend.String()+"/24", "dev", t.GenIf),
		cat(g, "addr", "add", ClientBase.String()+"/16", "dev", t.GenIf),
		cat(g, "route", "add", VIP.String()+"/32", "via", NodeAddr.String()),
		cat(g, "neigh", "replace", NodeAddr.String(), "lladdr", t.NodeMAC.String(), "dev", t.GenIf, "nud", "permanent"),
		cat(n, "link", "set", "lo", "up"),
		cat(n, "link", "set", t.NodeIf, "up"),
		cat(n, "addr", "add", NodeAddr.String()+"/24", "dev", t.NodeIf),
		cat(n, "route", "add", netip.PrefixFrom(ClientBase, 16).Masked().String(), "via", Backend.String()),
		cat(n, "neigh", "replace", Backend.String(), "lladdr", t.GenMAC.String(), "dev", t.NodeIf, "nud", "permanent"),
	} {
		if _, err := ipCmd(ctx, args...); err != nil {
			return nil, err
		}
	}
	// Frames sent by a namespace's own stack over veth carry partial
	// checksums that XDP cannot complete; with TX checksumming off they
	// leave complete. Only the node's kernel sends here (nftables case).
	for _, c := range [][3]string{{t.GenNS, t.GenIf}, {t.NodeNS, t.NodeIf}} {
		if _, err := t.Exec(ctx, c[0], "ethtool", "-K", c[1], "tx", "off"); err != nil {
			return nil, err
		}
	}
	if _, err := t.Exec(ctx, t.NodeNS, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return nil, err
	}
	log.Info("topology built", "gen", t.GenNS+"/"+t.GenIf, "node", t.NodeNS+"/"+t.NodeIf)
	return t, nil
}

// Close deletes both namespaces, and with them everything inside. It may
// be called more than once.
func (t *Topology) Close() error {
	if err := Remove(strings.TrimSuffix(t.GenNS, "gen")); err != nil {
		return err
	}
	t.log.Info("topology removed", "gen", t.GenNS, "node", t.NodeNS)
	return nil
}

// Remove deletes the namespaces prefix+"gen" and prefix+"node" if they
// exist; a namespace that is already gone is not an error.
func Remove(prefix string) error {
	var errs []error
	for _, ns := range []string{prefix + "gen", prefix + "node"} {
		if _, err := os.Stat("/run/netns/" + ns); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if _, err := ipCmd(context.Background(), "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Exec runs a command inside namespace ns (ip netns exec, which also
// mounts that namespace's /sys) and returns its combined output.
func (t *Topology) Exec(ctx context.Context, ns string, args ...string) ([]byte, error) {
	return ipCmd(ctx, append([]string{"netns", "exec", ns}, args...)...)
}

// Do runs fn on an OS thread that has entered namespace ns, for calls that
// act in the caller's namespace (attaching XDP by ifindex, BPF_PROG_TEST_RUN
// with an ingress ifindex). The thread is never handed back to the Go
// scheduler: it ends with fn's goroutine, so no other goroutine can run in
// the wrong namespace.
func Do(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			done <- fmt.Errorf("open namespace %s: %w", ns, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// Attrs returns the netlink attributes of link ifname in namespace ns, such
// as its XDP attachment and statistics.
func Attrs(ns, ifname string) (*netlink.LinkAttrs, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer func() { _ = h.Close() }()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in namespace %s: %w", ns, err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("link %s in namespace %s: %w", ifname, ns, err)
	}
	return l.Attrs(), nil
}

func cat(a []string, b ...string) []string {
	return append(slices.Clip(a), b...)
}

func linkInfo(ns, ifname string) (int, net.HardwareAddr, error) {
	a, err := Attrs(ns, ifname)
	if err != nil {
		return 0, nil, err
	}
	return a.Index, a.HardwareAddr, nil
}

func ipCmd(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// StalePrefixes returns the prefixes of namespaces named
// base+"<pid>-gen"/"-node" whose process pid no longer exists: leftovers of
// a run that was killed before it could clean up.
func StalePrefixes(base string) []string {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base)
		if !ok {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 {
			continue
		}
		if alive(pid) {
			continue
		}
		p := base + pid + "-"
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// AttachXDP attaches prog to interface ifname in namespace ns through a BPF
// link, in driver (native) mode unless flags say otherwise. Closing the link
// detaches the program; so does the end of the process.
func AttachXDP(ns, ifname string, prog *ebpf.Program, flags link.XDPAttachFlags) (link.Link, error) {
	if flags == 0 {
		flags = link.XDPDriverMode
	}
	var l link.Link
	err := Do(ns, func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: flags})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach xdp to %s in %s: %w", ifname, ns, err)
	}
	return l, nil
}

// XDPMode reports how an XDP program is attached to ifname in ns, as the
// kernel says: "native", "generic", "offload" or "none".
func XDPMode(ns, ifname string) (string, error) {
	a, err := Attrs(ns, ifname)
	if err != nil {
		return "", err
	}
	if a.Xdp == nil || !a.Xdp.Attached {
		return "none", nil
	}
	switch a.Xdp.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		return "native", nil
	case nl.XDP_ATTACHED_SKB:
		return "generic", nil
	case nl.XDP_ATTACHED_HW:
		return "offload", nil
	}
	return fmt.Sprintf("mode %d", a.Xdp.AttachMode), nil
}

// alive reports whether process pid exists and is not a zombie (a killed
// process is one until its parent reaps it).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
