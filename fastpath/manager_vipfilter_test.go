package fastpath

import (
	"net/netip"
	"testing"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestManagerVIPFilterAndEpoch checks what the Manager keeps for the
// program's prefilter and VIP copies: a bit per TCP/UDP VIP entry, the
// filter flag, and a new VIP epoch after every change of the VIP entries
// (and only then), also across an adoption of the maps.
func TestManagerVIPFilterAndEpoch(t *testing.T) {
	objs := loadSmall(t)
	m, err := NewManager(objs, ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("192.0.2.10")
	readCfg := func() fastpathbpf.FastpathNodeConfig {
		t.Helper()
		var c fastpathbpf.FastpathNodeConfig
		if err := objs.FpConfig.Lookup(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	wantFilter := func(keys ...vipKey) {
		t.Helper()
		want := new(vipFilter)
		for _, k := range keys {
			want.set(k)
		}
		got, err := readVIPFilter(objs.FpVipFilter)
		if err != nil {
			t.Fatal(err)
		}
		if *got != *want {
			t.Errorf("fp_vip_filter does not hold exactly the bits of %v", keys)
		}
	}
	web, l7 := vipKey{vip, 80, ProtoTCP}, vipKey{vip, 443, ProtoTCP}

	for _, tc := range []struct {
		name      string
		cfg       Config
		epochStep uint32
		keys      []vipKey
	}{
		{"first apply", testConfig("10.1.0.1:8080"), 1, []vipKey{web, l7}},
		{"same config", testConfig("10.1.0.1:8080"), 0, []vipKey{web, l7}},
		{"backends only", testConfig("10.1.0.1:8080", "10.1.0.2:8080"), 0, []vipKey{web, l7}},
		{"slow-path VIP removed", func() Config { c := testConfig("10.1.0.1:8080"); c.VIPs = c.VIPs[:1]; return c }(), 1, []vipKey{web}},
	} {
		before := readCfg()
		if _, err := m.Apply(tc.cfg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := readCfg()
		if after.Flags&uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_VIP_FILTER) == 0 {
			t.Errorf("%s: FP_CFG_VIP_FILTER not set", tc.name)
		}
		if after.VipEpoch != before.VipEpoch+tc.epochStep {
			t.Errorf("%s: VIP epoch %d → %d, want +%d", tc.name, before.VipEpoch, after.VipEpoch, tc.epochStep)
		}
		wantFilter(tc.keys...)
	}

	// A restarted agent adopts the filter and the epoch.
	before := readCfg()
	m2, err := NewManager(objs, ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig("10.1.0.1:8080", "10.1.0.2:8080")
	c.VIPs = c.VIPs[:1]
	if _, err := m2.Apply(c); err != nil {
		t.Fatal(err)
	}
	if got := readCfg().VipEpoch; got != before.VipEpoch {
		t.Errorf("adopting manager changed the VIP epoch %d → %d without a VIP change", before.VipEpoch, got)
	}
	wantFilter(web)
}
