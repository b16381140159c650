package fastpath

import (
	"errors"
	"fmt"

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
	// ConntrackSize is the number of tracked flows (an LRU).
	ConntrackSize uint32
	// NATSize is the number of NAT reply mappings (an LRU).
	NATSize uint32
	// BenchMissPath makes the program keep no state and rewrite nothing,
	// so that repeated test runs measure the conntrack-miss path. Only
	// benchmarks set it.
	BenchMissPath bool
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
		fastpathbpf.FastpathMapFpNat:          opts.NATSize,
	} {
		if n != 0 {
			spec.Maps[name].MaxEntries = n
		}
	}
	if err := spec.Variables[fastpathbpf.FastpathVarMaglevSize].Set(size); err != nil {
		return nil, fmt.Errorf("set maglev_size: %w", err)
	}
	var miss uint8
	if opts.BenchMissPath {
		miss = 1
	}
	if err := spec.Variables[fastpathbpf.FastpathVarBenchMissPath].Set(miss); err != nil {
		return nil, fmt.Errorf("set bench_miss_path: %w", err)
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

// Objects are the loaded program and maps.
type Objects struct {
	fastpathbpf.FastpathObjects
	// MaglevSize is the slot count of the Maglev tables.
	MaglevSize uint32
}

// Load loads the fast path into the kernel. A verifier rejection is
// returned with the verifier's log, readable as the kernel wrote it.
func Load(opts LoadOptions) (*Objects, error) {
	spec, err := Spec(opts)
	if err != nil {
		return nil, err
	}
	objs := &Objects{MaglevSize: spec.Maps[fastpathbpf.FastpathMapFpMaglev].InnerMap.MaxEntries}
	copts := &ebpf.CollectionOptions{}
	if opts.PinPath != "" {
		copts.Maps.PinPath = opts.PinPath
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
