package fastpath

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/novaedge/novaedge/fastpath/maglev"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// LoadOptions sizes the maps and sets the program's load-time constants.
// Every zero value means the default of bpf/fastpath_consts.h.
type LoadOptions struct {
	// MaglevSize is the slot count of every VIP's Maglev table; a prime.
	// Zero means maglev.DefaultSize (65537).
	MaglevSize uint32
	// MaxVIPs bounds VIP IDs (maglev tables and per-VIP counters).
	MaxVIPs uint32
	// MaxBackends bounds backend IDs.
	MaxBackends uint32
	// ConntrackSize is the number of tracked flows (an LRU) of each map:
	// IPv6 flows, IPv4 TCP flows and IPv4 UDP flows are kept in maps of
	// their own (the short IPv4 key leaves the protocol out).
	ConntrackSize uint32
	// NATSize is the number of NAT reply mappings (an LRU).
	NATSize uint32
	// FlowCacheSize is the slot count per CPU of the flow cache, copies of
	// open IPv4 flows' conntrack entries that spare the busiest flows'
	// packets the conntrack lookup (see bpf/fastpath.bpf.c): a power of two
	// up to 2^20; each slot takes 64 bytes per CPU. Zero means 1024 (64 KiB
	// per CPU); a cache too large for the CPU's caches makes the probe of
	// every packet a cache miss.
	FlowCacheSize uint32
	// BenchMissPath makes the program keep no state and rewrite nothing,
	// so that repeated test runs measure the conntrack-miss path. Only
	// benchmarks set it.
	BenchMissPath bool
	// BenchFlows, when not zero, makes test run n treat its packet as flow
	// n % BenchFlows (the source port and address varied) and leave the
	// packet unrewritten, so that repeated test runs measure a working set
	// of that many flows (^uint32(0): a new flow every run, state created).
	// Only benchmarks set it.
	BenchFlows uint32
	// PinPath, if set, is the directory whose pinned maps are reused (and
	// where new ones are pinned): ebpf.PinByName for every map.
	PinPath string
}

// Spec returns the program's collection spec with opts applied: map sizes
// and load-time constants. It does not touch the kernel.
func Spec(opts LoadOptions) (*ebpf.CollectionSpec, error) {
	spec, err := fastpathbpf.LoadFastpath()
	if err != nil {
		return nil, fmt.Errorf("parse fast path object: %w", err)
	}
	size := opts.MaglevSize
	if size == 0 {
		size = maglev.DefaultSize
	}
	spec.Maps[fastpathbpf.FastpathMapFpMaglev].InnerMap.MaxEntries = size
	for name, n := range map[string]uint32{
		fastpathbpf.FastpathMapFpMaglev:       opts.MaxVIPs,
		fastpathbpf.FastpathMapFpVipStats:     opts.MaxVIPs,
		fastpathbpf.FastpathMapFpBackends:     opts.MaxBackends,
		fastpathbpf.FastpathMapFpBackendStats: opts.MaxBackends,
		fastpathbpf.FastpathMapFpConntrack:    opts.ConntrackSize,
		fastpathbpf.FastpathMapFpCt4Tcp:       opts.ConntrackSize,
		fastpathbpf.FastpathMapFpCt4Udp:       opts.ConntrackSize,
		fastpathbpf.FastpathMapFpNat:          opts.NATSize,
	} {
		if n != 0 {
			spec.Maps[name].MaxEntries = n
		}
	}
	cacheBits, err := flowCacheBits(opts.FlowCacheSize)
	if err != nil {
		return nil, err
	}
	// Each CPU has a part of its own (see flowCacheIndexes).
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	spec.Maps[fastpathbpf.FastpathMapFpFlowCache].MaxEntries = uint32(ncpu) << cacheBits
	if err := spec.Variables[fastpathbpf.FastpathVarFlowCacheBits].Set(cacheBits); err != nil {
		return nil, fmt.Errorf("set flow_cache_bits: %w", err)
	}
	if err := spec.Variables[fastpathbpf.FastpathVarMaglevSize].Set(size); err != nil {
		return nil, fmt.Errorf("set maglev_size: %w", err)
	}
	magic, shift, _ := modMagic(size)
	if err := spec.Variables[fastpathbpf.FastpathVarMaglevModMagic].Set(magic); err != nil {
		return nil, fmt.Errorf("set maglev_mod_magic: %w", err)
	}
	if err := spec.Variables[fastpathbpf.FastpathVarMaglevModShift].Set(shift); err != nil {
		return nil, fmt.Errorf("set maglev_mod_shift: %w", err)
	}
	var miss uint8
	if opts.BenchMissPath {
		miss = 1
	}
	if err := spec.Variables[fastpathbpf.FastpathVarBenchMissPath].Set(miss); err != nil {
		return nil, fmt.Errorf("set bench_miss_path: %w", err)
	}
	if err := spec.Variables[fastpathbpf.FastpathVarBenchFlows].Set(opts.BenchFlows); err != nil {
		return nil, fmt.Errorf("set bench_flows: %w", err)
	}
	if opts.PinPath != "" {
		for _, m := range spec.Maps {
			if m.Name == ".rodata" || m.Name == ".data" || m.Name == ".bss" {
				continue
			}
			m.Pinning = ebpf.PinByName
		}
	}
	return spec, nil
}

// specFlowCacheBits is the flow_cache_bits Spec set.
func specFlowCacheBits(spec *ebpf.CollectionSpec) uint32 {
	var b uint32
	_ = spec.Variables[fastpathbpf.FastpathVarFlowCacheBits].Get(&b)
	return b
}

// defaultFlowCacheSize is LoadOptions.FlowCacheSize's zero value.
const defaultFlowCacheSize = 1 << 10

// flowCacheBits returns log2 of a flow cache size (0: the default), or an
// error naming the field for a size that is no power of two in range.
func flowCacheBits(size uint32) (uint32, error) {
	if size == 0 {
		size = defaultFlowCacheSize
	}
	if size < 2 || size > 1<<20 || size&(size-1) != 0 {
		return 0, fmt.Errorf("FlowCacheSize %d: want a power of two from 2 to %d", size, 1<<20)
	}
	return uint32(bits.TrailingZeros32(size)), nil
}

// Objects are the loaded program and maps.
type Objects struct {
	fastpathbpf.FastpathObjects
	// MaglevSize is the slot count of the Maglev tables.
	MaglevSize uint32
	// FlowCacheBits is log2 of the flow cache's slot count.
	FlowCacheBits uint32
}

// Load loads the fast path into the kernel. A verifier rejection is
// returned with the verifier's log, readable as the kernel wrote it.
func Load(opts LoadOptions) (*Objects, error) {
	spec, err := Spec(opts)
	if err != nil {
		return nil, err
	}
	if err := setClock(spec); err != nil {
		return nil, err
	}
	objs := &Objects{
		MaglevSize:    spec.Maps[fastpathbpf.FastpathMapFpMaglev].InnerMap.MaxEntries,
		FlowCacheBits: specFlowCacheBits(spec),
	}
	copts := &ebpf.CollectionOptions{}
	if opts.PinPath != "" {
		copts.Maps.PinPath = opts.PinPath
		if err := unpinOutgrownStats(spec, opts.PinPath); err != nil {
			return nil, err
		}
	}
	if err := spec.LoadAndAssign(&objs.FastpathObjects, copts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			// %+w prints the verifier's whole log, as %+v does, and wraps.
			return nil, fmt.Errorf("load fast path: the kernel verifier rejected the program:\n%+w", ve)
		}
		return nil, fmt.Errorf("load fast path: %w", err)
	}
	return objs, nil
}

// modMagic returns m and s such that n*m >> s == n / d for every 32-bit n,
// with n*m never overflowing 64 bits, so that the program computes a
// Maglev slot without a division; ok is false (and m 0: the program
// divides) for a divisor it finds none for. With m = ceil(2^s / d) and
// e = m*d - 2^s ≤ 2^(s-32), n*m / 2^s = n/d + n*e/(d*2^s), and the
// second term is below 1/d for n < 2^32, too little to reach the next
// integer: the floor is n/d (the round-up method of Granlund and
// Montgomery). The smallest such s is taken.
func modMagic(d uint32) (m uint64, s uint32, ok bool) {
	if d < 2 {
		return 0, 0, false
	}
	for s = 32; s < 64; s++ {
		p := uint64(1) << s
		m = p / uint64(d)
		if p%uint64(d) != 0 {
			m++
		}
		if m >= 1<<32 {
			break
		}
		if m*uint64(d)-p <= uint64(1)<<(s-32) {
			return m, s, true
		}
	}
	return 0, 0, false
}

// disposableMaps are the pinned maps whose contents are worth too little to
// keep across an upgrade that changes their shape: statistics, and the
// flow cache (copies of conntrack entries, made again by the next packets).
var disposableMaps = []string{fastpathbpf.FastpathMapFpCounters, fastpathbpf.FastpathMapFpFlowCache}

// unpinOutgrownStats removes the pin of a disposable map in dir whose shape
// differs from spec's (fp_counters of an agent with fewer counters, a flow
// cache of another kind or size), so that loading pins a new one instead
// of failing. Only these are worth so little: every other map keeps its
// pin, or the program fails to load (a change of those is a new Layout). The counters start again from
// zero, which Prometheus takes as a counter reset; the old program keeps
// counting into the old map until the links switch to the new one.
// fp_counters has spare slots (FP_COUNTER_SLOTS), so adding a counter
// changes its shape no more.
func unpinOutgrownStats(spec *ebpf.CollectionSpec, dir string) error {
	for _, name := range disposableMaps {
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open pinned %s: %w", name, err)
		}
		diff := spec.Maps[name].Compatible(m)
		_ = m.Close()
		if diff == nil {
			continue
		}
		if !errors.Is(diff, ebpf.ErrMapIncompatible) {
			return fmt.Errorf("compare pinned %s: %w", name, diff)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("unpin %s (%s): %w", name, diff.Error(), err)
		}
	}
	return nil
}
