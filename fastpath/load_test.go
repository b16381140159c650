package fastpath

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestLoadVerifier loads the program through the real kernel verifier with
// the default sizes and with the benchmark switch, so a change the verifier
// rejects fails here with its log.
func TestLoadVerifier(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts LoadOptions
	}{
		{"defaults", LoadOptions{}},
		{"bench miss path", LoadOptions{BenchMissPath: true}},
		{"bench flows", LoadOptions{BenchFlows: 65536}},
		{"small tables", LoadOptions{MaglevSize: 251, MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 1024, NATSize: 1024}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Load(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = objs.Close() }()
			info, err := objs.FpMaglev.Info()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.opts.MaxVIPs
			if want == 0 {
				want = 4096
			}
			if info.MaxEntries != want {
				t.Errorf("fp_maglev max entries = %d, want %d", info.MaxEntries, want)
			}
		})
	}
}

// TestLoadReplacesOutgrownDisposableMaps loads the program over the pins
// of an agent whose fp_counters had fewer slots (layout v4 before the
// spare slots) and whose flow cache was a per-CPU array of 48-byte slots:
// both pins are replaced by maps of the new shape, every other pinned map
// (here a VIP entry in fp_vips) is reused, and the next load reuses the
// new maps as they are.
func TestLoadReplacesOutgrownDisposableMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test must run as root: it loads the program and pins maps in bpffs")
	}
	dir := fmt.Sprintf("/sys/fs/bpf/nvfp-load-%d", os.Getpid())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("create %s (is bpffs mounted at /sys/fs/bpf?): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	opts := LoadOptions{MaglevSize: 251, MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 1024, NATSize: 1024, PinPath: dir}
	load := func() *Objects {
		t.Helper()
		objs, err := Load(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = objs.Close() })
		return objs
	}
	first := load()
	vk := fastpathbpf.FastpathVipKey{Addr: [16]byte{203, 0, 113, 1}, Port: 80, Proto: 6, Family: 4}
	if err := first.FpVips.Put(vk, fastpathbpf.FastpathVipInfo{Id: 7}); err != nil {
		t.Fatalf("write fp_vips: %v", err)
	}
	// What the previous build pinned: one slot per counter it had.
	path := filepath.Join(dir, fastpathbpf.FastpathMapFpCounters)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 30})
	if err != nil {
		t.Fatalf("create the old fp_counters: %v", err)
	}
	defer func() { _ = old.Close() }()
	if err := old.Pin(path); err != nil {
		t.Fatalf("pin the old fp_counters: %v", err)
	}
	cachePath := filepath.Join(dir, fastpathbpf.FastpathMapFpFlowCache)
	if err := os.Remove(cachePath); err != nil {
		t.Fatal(err)
	}
	oldCache, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 48, MaxEntries: 1024})
	if err != nil {
		t.Fatalf("create the old fp_flow_cache: %v", err)
	}
	defer func() { _ = oldCache.Close() }()
	if err := oldCache.Pin(cachePath); err != nil {
		t.Fatalf("pin the old fp_flow_cache: %v", err)
	}

	second := load()
	info, err := second.FpCounters.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxEntries != 64 || info.MaxEntries < uint32(fastpathbpf.FastpathFpCounterFP_C_MAX) {
		t.Errorf("fp_counters has %d slots, want 64 (FP_COUNTER_SLOTS) for %d counters", info.MaxEntries, fastpathbpf.FastpathFpCounterFP_C_MAX)
	}
	var vi fastpathbpf.FastpathVipInfo
	if err := second.FpVips.Lookup(vk, &vi); err != nil || vi.Id != 7 {
		t.Errorf("fp_vips entry after the reload: %+v, %v; want the pinned map reused with ID 7", vi, err)
	}
	if _, err := second.Counters(); err != nil {
		t.Errorf("read the new counters: %v", err)
	}
	if typ, vs := second.FpFlowCache.Type(), second.FpFlowCache.ValueSize(); typ != ebpf.Array || vs != 64 {
		t.Errorf("fp_flow_cache is a %v of %d-byte values, want the new Array of 64-byte slots", typ, vs)
	}
	cacheInfo, err := second.FpFlowCache.Info()
	if err != nil {
		t.Fatal(err)
	}

	third := load()
	id2, _ := info.ID()
	info3, err := third.FpCounters.Info()
	if err != nil {
		t.Fatal(err)
	}
	if id3, _ := info3.ID(); id3 != id2 {
		t.Errorf("fp_counters replaced again (map ID %d, was %d): a pin of the right size must be reused", id3, id2)
	}
	cacheInfo3, err := third.FpFlowCache.Info()
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := cacheInfo.ID()
	if c3, _ := cacheInfo3.ID(); c3 != c2 {
		t.Errorf("fp_flow_cache replaced again (map ID %d, was %d): a pin of the right shape must be reused", c3, c2)
	}
}
