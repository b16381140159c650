package fastpath

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/novaedge/novaedge/fastpath/internal/mono"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// DefaultPinRoot is where the agent pins the fast path: programs, maps and
// links under <root>/<Layout>/.
const DefaultPinRoot = "/sys/fs/bpf/novaedge"

// Layout versions the pinned maps' shapes. An agent whose maps differ
// pins under a new layout directory instead of reusing incompatible maps.
// fp_counters is the exception: it holds only statistics, so Load replaces
// a pinned one of another size (a counter added) and keeps the layout,
// with every flow's state; it has spare slots so that added counters fit.
const Layout = "v4"

// MapsDir returns the directory of the pinned maps under root.
func MapsDir(root string) string { return filepath.Join(root, Layout, "maps") }

// Pinned reads the maps an agent pinned, for novaedgectl and bpftool-like
// inspection. It never writes.
type Pinned struct {
	maps map[string]*ebpf.Map
}

// OpenPinned opens the pinned maps under root (DefaultPinRoot if empty).
func OpenPinned(root string) (*Pinned, error) {
	if root == "" {
		root = DefaultPinRoot
	}
	dir := MapsDir(root)
	p := &Pinned{maps: make(map[string]*ebpf.Map)}
	for _, name := range []string{
		fastpathbpf.FastpathMapFpVips, fastpathbpf.FastpathMapFpBackends, fastpathbpf.FastpathMapFpMaglev,
		fastpathbpf.FastpathMapFpConntrack, fastpathbpf.FastpathMapFpCt4Tcp, fastpathbpf.FastpathMapFpCt4Udp, fastpathbpf.FastpathMapFpNat, fastpathbpf.FastpathMapFpCounters,
		fastpathbpf.FastpathMapFpVipStats, fastpathbpf.FastpathMapFpBackendStats, fastpathbpf.FastpathMapFpConfig,
		fastpathbpf.FastpathMapFpFlowCache,
	} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("open pinned map %s (is the fast path installed? an agent pins it under %s): %w", name, dir, err)
		}
		p.maps[name] = m
	}
	return p, nil
}

// Close releases the maps.
func (p *Pinned) Close() {
	for _, m := range p.maps {
		_ = m.Close()
	}
}

// VIPInfo is one VIP entry as the program sees it.
type VIPInfo struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	// Protocol is "tcp", "udp" or "addr" (the address entry for ICMP).
	Protocol string `json:"protocol"`
	ID       uint32 `json:"id"`
	Forward  string `json:"forward"`
	GUEPort  uint16 `json:"guePort,omitempty"`
	Echo     bool   `json:"echo,omitempty"`
	// ClientAffinity: new flows placed by the client address alone.
	ClientAffinity bool   `json:"clientAffinity,omitempty"`
	Packets        uint64 `json:"packets"`
	Bytes          uint64 `json:"bytes"`
}

func protoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case 0:
		return "addr"
	}
	return fmt.Sprint(p)
}

// VIPs lists the VIP entries with their traffic counters.
func (p *Pinned) VIPs() ([]VIPInfo, error) {
	type entry struct {
		addr netip.Addr
		info VIPInfo
	}
	var (
		k       fastpathbpf.FastpathVipKey
		v       fastpathbpf.FastpathVipInfo
		entries []entry
	)
	it := p.maps[fastpathbpf.FastpathMapFpVips].Iterate()
	for it.Next(&k, &v) {
		a := addrFrom(k.Addr, k.Family)
		info := VIPInfo{
			Address: a.String(), Port: k.Port, Protocol: protoName(k.Proto), ID: v.Id,
			Forward: ForwardName(Forward(v.Forward)), GUEPort: v.GuePort,
			Echo:           v.Flags&uint32(fastpathbpf.FastpathFpVipFlagsFP_VIP_ECHO) != 0,
			ClientAffinity: v.Flags&uint32(fastpathbpf.FastpathFpVipFlagsFP_VIP_AFFINITY_CLIENT) != 0,
		}
		if v.Id != 0 {
			t, err := readTraffic(p.maps[fastpathbpf.FastpathMapFpVipStats], v.Id)
			if err != nil {
				return nil, err
			}
			info.Packets, info.Bytes = t.Packets, t.Bytes
		}
		entries = append(entries, entry{a, info})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read fp_vips: %w", err)
	}
	// After the counters (see stats.go).
	pending, err := readPending(p.maps[fastpathbpf.FastpathMapFpFlowCache])
	if err != nil {
		return nil, err
	}
	for i := range entries {
		if id := entries[i].info.ID; id != 0 {
			entries[i].info.Packets += pending.vips[id].Packets
			entries[i].info.Bytes += pending.vips[id].Bytes
		}
	}
	slices.SortFunc(entries, func(x, y entry) int {
		return cmp.Or(x.addr.Compare(y.addr), cmp.Compare(x.info.Port, y.info.Port), strings.Compare(x.info.Protocol, y.info.Protocol))
	})
	out := make([]VIPInfo, len(entries))
	for i, e := range entries {
		out[i] = e.info
	}
	return out, nil
}

// BackendInfo is one backend as the program sees it.
type BackendInfo struct {
	ID      uint32 `json:"id"`
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Backends lists the active backends by ID with their traffic counters.
func (p *Pinned) Backends() ([]BackendInfo, error) {
	var (
		id  uint32
		be  fastpathbpf.FastpathBackend
		out []BackendInfo
	)
	it := p.maps[fastpathbpf.FastpathMapFpBackends].Iterate()
	for it.Next(&id, &be) {
		if be.Flags&uint8(fastpathbpf.FastpathFpBackendFlagsFP_BACKEND_ACTIVE) == 0 {
			continue
		}
		t, err := readTraffic(p.maps[fastpathbpf.FastpathMapFpBackendStats], id)
		if err != nil {
			return nil, err
		}
		out = append(out, BackendInfo{ID: id, Address: addrFrom(be.Addr, be.Family).String(), Port: be.Port, Packets: t.Packets, Bytes: t.Bytes})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read fp_backends: %w", err)
	}
	// After the counters (see stats.go).
	pending, err := readPending(p.maps[fastpathbpf.FastpathMapFpFlowCache])
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Packets += pending.backends[out[i].ID].Packets
		out[i].Bytes += pending.backends[out[i].ID].Bytes
	}
	return out, nil
}

// MaglevShare is one backend's share of a Maglev table.
type MaglevShare struct {
	BackendID uint32  `json:"backendId"`
	Backend   string  `json:"backend"`
	Slots     int     `json:"slots"`
	Share     float64 `json:"share"`
}

// MaglevInfo summarises a VIP's installed table.
type MaglevInfo struct {
	VIPID  uint32        `json:"vipId"`
	Size   int           `json:"size"`
	Empty  int           `json:"emptySlots"`
	Shares []MaglevShare `json:"shares"`
	// Table is the whole table (slot → backend ID), only when asked for.
	Table []uint32 `json:"table,omitempty"`
}

// ErrNoSuchVIP reports a VIP entry that is not installed.
var ErrNoSuchVIP = errors.New("no such VIP entry")

// Maglev returns the installed table of the VIP entry addr:port/proto.
func (p *Pinned) Maglev(addr netip.Addr, port uint16, proto uint8, full bool) (MaglevInfo, error) {
	var info MaglevInfo
	k := vipKeyValue(vipKey{addr.Unmap(), port, proto})
	var v fastpathbpf.FastpathVipInfo
	if err := p.maps[fastpathbpf.FastpathMapFpVips].Lookup(&k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return info, fmt.Errorf("%s: %w", vipString(VIP{Addr: addr, Port: port, Proto: proto}), ErrNoSuchVIP)
		}
		return info, err
	}
	if v.Id == 0 {
		return info, fmt.Errorf("%s is passed to the slow path: it has no Maglev table", vipString(VIP{Addr: addr, Port: port, Proto: proto}))
	}
	info.VIPID = v.Id
	var inner *ebpf.Map
	if err := p.maps[fastpathbpf.FastpathMapFpMaglev].Lookup(v.Id, &inner); err != nil {
		return info, fmt.Errorf("read maglev table of VIP %d: %w", v.Id, err)
	}
	defer func() { _ = inner.Close() }()
	mi, err := inner.Info()
	if err != nil {
		return info, err
	}
	t, err := readInner(inner, mi.MaxEntries)
	if err != nil {
		return info, err
	}
	info.Size = len(t)
	counts := map[uint32]int{}
	for _, id := range t {
		if id == 0 {
			info.Empty++
			continue
		}
		counts[id]++
	}
	names := map[uint32]string{}
	if bs, err := p.Backends(); err == nil {
		for _, b := range bs {
			names[b.ID] = netip.AddrPortFrom(netip.MustParseAddr(b.Address), b.Port).String()
		}
	}
	for id, n := range counts {
		info.Shares = append(info.Shares, MaglevShare{BackendID: id, Backend: names[id], Slots: n, Share: float64(n) / float64(len(t))})
	}
	slices.SortFunc(info.Shares, func(a, b MaglevShare) int { return cmp.Compare(a.BackendID, b.BackendID) })
	if full {
		info.Table = t
	}
	return info, nil
}

// Flow is one tracked flow.
type Flow struct {
	Client    string `json:"client"`
	VIP       string `json:"vip"`
	Protocol  string `json:"protocol"`
	BackendID uint32 `json:"backendId"`
	VIPID     uint32 `json:"vipId"`
	State     string `json:"state"`
	NATPort   uint16 `json:"natPort,omitempty"`
	// IdleSeconds is how long ago the flow was last refreshed (the
	// program refreshes at most once a second).
	IdleSeconds float64 `json:"idleSeconds"`
}

// Conntrack lists up to limit tracked flows (0: all) and the total count.
func (p *Pinned) Conntrack(limit int) ([]Flow, int, error) {
	now, err := mono.Now()
	if err != nil {
		return nil, 0, err
	}
	var (
		out []Flow
		n   int
	)
	err = rangeConntrack(p.maps[fastpathbpf.FastpathMapFpCt4Tcp], p.maps[fastpathbpf.FastpathMapFpCt4Udp], p.maps[fastpathbpf.FastpathMapFpConntrack],
		func(k fastpathbpf.FastpathFlowKey, v fastpathbpf.FastpathCtValue) bool {
			n++
			if limit > 0 && len(out) >= limit {
				return true
			}
			src, dst := addrFrom(k.Src, k.Family), addrFrom(k.Dst, k.Family)
			state := map[uint8]string{1: "syn", 2: "open", 3: "closing"}[v.State]
			out = append(out, Flow{
				Client: netip.AddrPortFrom(src, k.Sport).String(), VIP: netip.AddrPortFrom(dst, k.Dport).String(),
				Protocol: protoName(k.Proto), BackendID: v.BackendId, VIPID: v.VipId, State: state, NATPort: v.NatPort,
				IdleSeconds: max(0, (now - time.Duration(v.LastSeen)).Seconds()),
			})
			return true
		})
	if err != nil {
		return nil, 0, err
	}
	return out, n, nil
}

// counterNames are the names of enum fp_counter, read from the program's
// BTF so that they never drift from the C source.
var counterNames = sync.OnceValue(func() map[uint64]string {
	names := map[uint64]string{}
	spec, err := fastpathbpf.LoadFastpath()
	if err != nil {
		return names
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName("fp_counter", &e); err != nil {
		return names
	}
	for _, v := range e.Values {
		names[v.Value] = strings.ToLower(strings.TrimPrefix(v.Name, "FP_C_"))
	}
	return names
})

// CounterName is the name of a program counter ("pass_no_neigh"), from its
// C enum.
func CounterName(c fastpathbpf.FastpathFpCounter) string {
	if n, ok := counterNames()[uint64(c)]; ok {
		return n
	}
	return fmt.Sprintf("counter_%d", c)
}

// Counters returns every program counter summed over CPUs, by name.
func (p *Pinned) Counters() (map[string]uint64, error) {
	return ReadCounters(p.maps[fastpathbpf.FastpathMapFpCounters], p.maps[fastpathbpf.FastpathMapFpFlowCache])
}
