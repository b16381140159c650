package local

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		iface   string
		want    Address
		wantErr string // substring; empty: no error
	}{
		{name: "bare ipv4", addr: "127.0.10.1", want: Address{netip.MustParsePrefix("127.0.10.1/32"), "lo"}},
		{name: "ipv4 /32", addr: "127.0.10.1/32", iface: "eth0", want: Address{netip.MustParsePrefix("127.0.10.1/32"), "eth0"}},
		{name: "bare ipv6", addr: "fd00::1", want: Address{netip.MustParsePrefix("fd00::1/128"), "lo"}},
		{name: "ipv6 /128", addr: "fd00::1/128", iface: "lo", want: Address{netip.MustParsePrefix("fd00::1/128"), "lo"}},
		{name: "ipv4 subnet", addr: "127.0.10.0/24", wantErr: "127.0.10.0/24 is not a host prefix: want /32"},
		{name: "ipv4 host bits with short prefix", addr: "127.0.10.1/24", wantErr: "not a host prefix"},
		{name: "ipv6 subnet", addr: "fd00::/64", wantErr: "fd00::/64 is not a host prefix: want /128"},
		{name: "empty", addr: "", wantErr: `parse vip address ""`},
		{name: "garbage", addr: "vip.example", wantErr: `parse vip address "vip.example"`},
		{name: "zone", addr: "fe80::1%eth0", wantErr: "zone"},
		{name: "ipv4-mapped", addr: "::ffff:127.0.10.1", wantErr: "use 127.0.10.1"},
		{name: "unspecified", addr: "0.0.0.0", wantErr: "cannot be bound"},
		{name: "multicast", addr: "ff02::1/128", wantErr: "cannot be bound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAddress(tc.addr, tc.iface)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseAddress(%q) error = %v, want one containing %q", tc.addr, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tc.addr, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("ParseAddress(%q) (-want +got):\n%s", tc.addr, diff)
			}
		})
	}
}

// FuzzParseAddress checks that whatever ParseAddress accepts is a bindable
// host address that parses back to itself.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"127.0.10.1", "127.0.10.1/32", "fd00::1", "fd00::1/128", "10.0.0.0/8", "fe80::1%lo", "::ffff:1.2.3.4", "", "/", "1.2.3.4/33"} {
		f.Add(s, "")
	}
	f.Add("fd00::1", "eth0")
	f.Fuzz(func(t *testing.T, s, iface string) {
		a, err := ParseAddress(s, iface)
		if err != nil {
			return
		}
		if !a.Prefix.IsSingleIP() || a.Prefix.Addr().Zone() != "" || a.Prefix.Addr().Is4In6() {
			t.Fatalf("ParseAddress(%q) = %v: not a plain host prefix", s, a)
		}
		if a.Interface == "" || (iface != "" && a.Interface != iface) {
			t.Fatalf("ParseAddress(%q, %q) interface = %q", s, iface, a.Interface)
		}
		again, err := ParseAddress(a.Prefix.String(), a.Interface)
		if err != nil || again != a {
			t.Fatalf("round trip of %v: got %v, %v", a, again, err)
		}
	})
}
