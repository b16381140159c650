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
// accessors and checks that IPv4 flows land in fp_ct4_tcp or fp_ct4_udp by
// protocol under the short key (the layout the program looks up), IPv6
// flows in fp_conntrack, that lookups and the range see all as struct
// flow_key, and that an IPv4 key of another protocol is refused.
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
		name string
		key  fastpathbpf.FastpathFlowKey
		// v4Map is the IPv4 map the flow belongs in, other the other
		// one; both nil for IPv6.
		v4Map, other *ebpf.Map
		wantK4       fastpathbpf.FastpathFlowKey4
		wantErr      bool
	}{
		{"ipv4 tcp", key("192.0.2.1", "198.51.100.10", 40000, 80, 6), objs.FpCt4Tcp, objs.FpCt4Udp,
			fastpathbpf.FastpathFlowKey4{Src: [4]uint8{192, 0, 2, 1}, Dst: [4]uint8{198, 51, 100, 10}, Sport: 40000, Dport: 80}, false},
		{"ipv4 udp", key("10.0.0.7", "10.0.0.1", 5353, 53, 17), objs.FpCt4Udp, objs.FpCt4Tcp,
			fastpathbpf.FastpathFlowKey4{Src: [4]uint8{10, 0, 0, 7}, Dst: [4]uint8{10, 0, 0, 1}, Sport: 5353, Dport: 53}, false},
		{"ipv4 udp, same ports as tcp", key("192.0.2.1", "198.51.100.10", 40000, 80, 17), objs.FpCt4Udp, objs.FpCt4Tcp,
			fastpathbpf.FastpathFlowKey4{Src: [4]uint8{192, 0, 2, 1}, Dst: [4]uint8{198, 51, 100, 10}, Sport: 40000, Dport: 80}, false},
		{"ipv6 tcp", key("2001:db8::1", "2001:db8::10", 40000, 443, 6), nil, nil, fastpathbpf.FastpathFlowKey4{}, false},
		{"ipv4 sctp is refused", key("192.0.2.1", "198.51.100.10", 40000, 80, 132), nil, nil, fastpathbpf.FastpathFlowKey4{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := fastpathbpf.FastpathCtValue{BackendId: 7, VipId: 3, State: 2, LastSeen: 12345 + uint64(tc.key.Proto)}
			err := objs.PutConntrack(tc.key, v)
			var got fastpathbpf.FastpathCtValue
			lerr := objs.LookupConntrack(tc.key, &got)
			if tc.wantErr {
				if err == nil || lerr == nil || errors.Is(lerr, ebpf.ErrKeyNotExist) {
					t.Fatalf("PutConntrack: %v, LookupConntrack: %v; want errors naming the protocol", err, lerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lerr != nil {
				t.Fatal(lerr)
			}
			if diff := cmp.Diff(v, got); diff != "" {
				t.Errorf("LookupConntrack (-want +got):\n%s", diff)
			}
			var raw fastpathbpf.FastpathCtValue
			if tc.v4Map != nil {
				if err := tc.v4Map.Lookup(&tc.wantK4, &raw); err != nil || raw != v {
					t.Errorf("lookup under the short key: %+v, %v; want %+v", raw, err, v)
				}
				if err := tc.other.Lookup(&tc.wantK4, &raw); err == nil && raw == v {
					t.Errorf("the flow is in the other protocol's map too")
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
