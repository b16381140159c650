package fastpath

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

func loadSmall(t *testing.T) *Objects {
	t.Helper()
	objs, err := Load(LoadOptions{MaglevSize: 251, MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 1024, NATSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	return objs
}

func backendsOf(addrs ...string) []Backend {
	var out []Backend
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		out = append(out, Backend{Addr: ap.Addr(), Port: ap.Port(), Weight: 1})
	}
	return out
}

func testConfig(backends ...string) Config {
	return Config{
		Node: Node{V4: netip.MustParseAddr("10.0.0.1")},
		VIPs: []VIP{
			{Name: "web", Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Proto: ProtoTCP, Forward: ForwardNAT, Backends: backendsOf(backends...)},
			{Name: "l7", Addr: netip.MustParseAddr("192.0.2.10"), Port: 443, Proto: ProtoTCP, Forward: ForwardPass},
		},
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestManagerApply(t *testing.T) {
	objs := loadSmall(t)
	clk := &clock{time.Unix(1000, 0)}
	m, err := NewManager(objs, ManagerOptions{Now: clk.now, IDHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("192.0.2.10")

	res, err := m.Apply(testConfig("10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"))
	if err != nil {
		t.Fatal(err)
	}
	if res.VIPsAdded != 2 || res.BackendsAdded != 3 || res.TablesSwapped != 1 {
		t.Fatalf("first apply: %+v", res)
	}
	// The program sees the VIP entries, the address entry and the table.
	var info fastpathbpf.FastpathVipInfo
	k := vipKeyValue(vipKey{vip, 80, ProtoTCP})
	if err := objs.FpVips.Lookup(&k, &info); err != nil {
		t.Fatal(err)
	}
	if info.Forward != uint8(ForwardNAT) || info.Id == 0 {
		t.Fatalf("VIP entry: %+v", info)
	}
	k = vipKeyValue(vipKey{vip, 443, ProtoTCP})
	if err := objs.FpVips.Lookup(&k, &info); err != nil || info.Forward != uint8(ForwardPass) {
		t.Fatalf("slow-path entry: %+v, %v", info, err)
	}
	k = vipKeyValue(vipKey{addr: vip})
	if err := objs.FpVips.Lookup(&k, &info); err != nil || info.Flags&uint32(fastpathbpf.FastpathFpVipFlagsFP_VIP_ECHO) == 0 {
		t.Fatalf("address entry: %+v, %v", info, err)
	}
	var cfg fastpathbpf.FastpathNodeConfig
	if err := objs.FpConfig.Lookup(uint32(0), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Flags&uint32(fastpathbpf.FastpathFpConfigFlagsFP_CFG_NAT) == 0 || cfg.NatPortMin != DefaultNATPortMin {
		t.Fatalf("node config: %+v", cfg)
	}
	installed, err := m.readTable(m.vips[vipKey{vip, 80, ProtoTCP}].id)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[uint32]int{}
	for _, id := range installed {
		counts[id]++
	}
	if len(counts) != 3 || counts[0] != 0 {
		t.Fatalf("installed table owners: %v", counts)
	}

	// The same config again changes nothing.
	if res, err := m.Apply(testConfig("10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080")); err != nil || res != (ApplyResult{}) {
		t.Fatalf("re-apply: %+v, %v", res, err)
	}

	// Removing a backend keeps the others' IDs and quarantines its own.
	id3, _ := m.BackendID(netip.MustParseAddr("10.1.0.3"), 8080)
	id1, _ := m.BackendID(netip.MustParseAddr("10.1.0.1"), 8080)
	res, err = m.Apply(testConfig("10.1.0.1:8080", "10.1.0.2:8080"))
	if err != nil {
		t.Fatal(err)
	}
	if res.BackendsRemoved != 1 || res.TablesSwapped != 1 {
		t.Fatalf("remove: %+v", res)
	}
	if got, _ := m.BackendID(netip.MustParseAddr("10.1.0.1"), 8080); got != id1 {
		t.Fatalf("backend ID changed %d → %d", id1, got)
	}
	var be fastpathbpf.FastpathBackend
	if err := objs.FpBackends.Lookup(id3, &be); err != nil || be.Flags != 0 {
		t.Fatalf("removed backend still active: %+v, %v", be, err)
	}
	res, err = m.Apply(testConfig("10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.4:8080"))
	if err != nil {
		t.Fatal(err)
	}
	if id4, _ := m.BackendID(netip.MustParseAddr("10.1.0.4"), 8080); id4 == id3 {
		t.Fatalf("quarantined ID %d reused at once", id3)
	}

	// An invalid config is refused whole and changes nothing.
	bad := testConfig("10.1.0.1:8080")
	bad.VIPs = append(bad.VIPs, VIP{Name: "bad", Addr: vip, Port: 81, Proto: 1, Forward: ForwardNAT})
	if _, err := m.Apply(bad); err == nil || !strings.Contains(err.Error(), "protocol 1") {
		t.Fatalf("bad config: %v", err)
	}
	if _, ok := m.BackendID(netip.MustParseAddr("10.1.0.4"), 8080); !ok {
		t.Fatal("refused config removed a backend")
	}

	// A new manager on the same maps (an agent restart) adopts IDs and tables.
	before := m.Table(vip, 80, ProtoTCP)
	m2, err := NewManager(objs, ManagerOptions{Now: clk.now, IDHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m2.BackendID(netip.MustParseAddr("10.1.0.1"), 8080); got != id1 {
		t.Fatalf("adopted backend ID %d, want %d", got, id1)
	}
	after := m2.Table(vip, 80, ProtoTCP)
	if len(after) != len(before) {
		t.Fatalf("adopted table has %d slots, want %d", len(after), len(before))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("adopted table differs at slot %d", i)
		}
	}
	if res, err := m2.Apply(testConfig("10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.4:8080")); err != nil || res != (ApplyResult{}) {
		t.Fatalf("apply after adopt should change nothing: %+v, %v", res, err)
	}
	// The ID released before the restart is still held after it, and
	// reused once the hold has passed and no fresh ID is left.
	if len(m2.beIDs.quarantine) == 0 || m2.beIDs.quarantine[0].id != id3 {
		t.Fatalf("released ID %d not quarantined after adoption: %+v", id3, m2.beIDs.quarantine)
	}

	// Removing every VIP empties the maps.
	if _, err := m2.Apply(Config{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	var kk fastpathbpf.FastpathVipKey
	it := objs.FpVips.Iterate()
	for it.Next(&kk, &info) {
		n++
	}
	if n != 0 {
		t.Fatalf("%d VIP entries left", n)
	}
}

func TestValidate(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	be6 := []Backend{{Addr: v6, Port: 80, Weight: 1}}
	for _, tc := range []struct {
		name string
		c    Config
		want string
	}{
		{"nat across families", Config{Node: Node{V4: v4, V6: v6}, VIPs: []VIP{{Addr: v4, Port: 80, Proto: ProtoTCP, Forward: ForwardNAT, Backends: be6}}}, "cannot forward between IPv4 and IPv6"},
		{"nat without node address", Config{VIPs: []VIP{{Addr: v6, Port: 80, Proto: ProtoTCP, Forward: ForwardNAT, Backends: be6}}}, "needs the node's IPv6 address"},
		{"duplicate", Config{VIPs: []VIP{{Addr: v4, Port: 80, Proto: ProtoTCP}, {Addr: v4, Port: 80, Proto: ProtoTCP}}}, "same address, port and protocol"},
		{"ipip across families is fine", Config{Node: Node{V6: v6}, VIPs: []VIP{{Addr: v4, Port: 80, Proto: ProtoTCP, Forward: ForwardDSRIPIP, Backends: be6}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestFlowKeyMatchesFlowhash(t *testing.T) {
	// The map key layout and flowhash.Addr16 agree on IPv4 placement.
	a := flowhash.Addr16(netip.MustParseAddr("10.1.2.3"))
	if a[0] != 10 || a[3] != 3 || a[4] != 0 {
		t.Fatalf("Addr16 = %v", a)
	}
}
