package fastpath

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestConntrackByFamily writes flows of both families through the Go
// accessors and checks that IPv4 flows land in fp_conntrack4 under the short
// key (the layout the program looks up), IPv6 flows in fp_conntrack, and
// that lookups and the range see both as struct flow_key.
func TestConntrackByFamily(t *testing.T) {
	objs, err := Load(LoadOptions{MaglevSize: 251, MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 1024, NATSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = objs.Close() }()

	key := func(src, dst string, sport, dport uint16, proto uint8) fastpathbpf.FastpathFlowKey {
		s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
		fam := uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV4)
		if s.Is6() {
			fam = uint8(fastpathbpf.FastpathFpFamilyFP_FAMILY_IPV6)
		}
		return fastpathbpf.FastpathFlowKey{Src: flowhash.Addr16(s), Dst: flowhash.Addr16(d), Sport: sport, Dport: dport, Proto: proto, Family: fam}
	}
	for _, tc := range []struct {
		name   string
		key    fastpathbpf.FastpathFlowKey
		v4Map  bool
		wantK4 fastpathbpf.FastpathFlowKey4
	}{
		{"ipv4 tcp", key("192.0.2.1", "198.51.100.10", 40000, 80, 6), true,
			fastpathbpf.FastpathFlowKey4{Src: [4]uint8{192, 0, 2, 1}, Dst: [4]uint8{198, 51, 100, 10}, Sport: 40000, Dport: 80, Proto: 6}},
		{"ipv4 udp", key("10.0.0.7", "10.0.0.1", 5353, 53, 17), true,
			fastpathbpf.FastpathFlowKey4{Src: [4]uint8{10, 0, 0, 7}, Dst: [4]uint8{10, 0, 0, 1}, Sport: 5353, Dport: 53, Proto: 17}},
		{"ipv6 tcp", key("2001:db8::1", "2001:db8::10", 40000, 443, 6), false, fastpathbpf.FastpathFlowKey4{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := fastpathbpf.FastpathCtValue{BackendId: 7, VipId: 3, State: 2, LastSeen: 12345}
			if err := objs.PutConntrack(tc.key, v); err != nil {
				t.Fatal(err)
			}
			var got fastpathbpf.FastpathCtValue
			if err := objs.LookupConntrack(tc.key, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(v, got); diff != "" {
				t.Errorf("LookupConntrack (-want +got):\n%s", diff)
			}
			var raw fastpathbpf.FastpathCtValue
			if tc.v4Map {
				if err := objs.FpConntrack4.Lookup(&tc.wantK4, &raw); err != nil {
					t.Errorf("fp_conntrack4 lookup under the short key: %v", err)
				}
				if err := objs.FpConntrack.Lookup(&tc.key, &raw); !errors.Is(err, ebpf.ErrKeyNotExist) {
					t.Errorf("IPv4 flow in fp_conntrack: err = %v, want ErrKeyNotExist", err)
				}
			} else if err := objs.FpConntrack.Lookup(&tc.key, &raw); err != nil {
				t.Errorf("fp_conntrack lookup: %v", err)
			}
			found := false
			if err := objs.RangeConntrack(func(k fastpathbpf.FastpathFlowKey, got fastpathbpf.FastpathCtValue) bool {
				if k == tc.key {
					found = got == v
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if !found {
				t.Errorf("RangeConntrack did not return %+v with its value", tc.key)
			}
		})
	}
	n := 0
	if err := objs.RangeConntrack(func(fastpathbpf.FastpathFlowKey, fastpathbpf.FastpathCtValue) bool { n++; return n < 2 }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("RangeConntrack went on after fn returned false: %d calls, want 2", n)
	}
}
