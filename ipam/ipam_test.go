package ipam

import (
	"net/netip"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		cidr    bool
		want    string
		wantErr bool
		norm    bool // compare the normalised form, not the text
	}{
		{name: "cidr", in: "10.200.0.0/24", cidr: true, want: "10.200.0.0-10.200.0.255", norm: true},
		{name: "cidr v6", in: "2001:db8::/126", cidr: true, want: "2001:db8::-2001:db8::3", norm: true},
		{name: "cidr host bits", in: "10.200.0.1/24", cidr: true, wantErr: true},
		{name: "cidr garbage", in: "10.300.0.0/24", cidr: true, wantErr: true},
		{name: "host /32", in: "10.200.1.10/32", want: "10.200.1.10", norm: true},
		{name: "plain", in: "10.200.1.10", want: "10.200.1.10"},
		{name: "range", in: "10.0.0.1-10.0.0.9", want: "10.0.0.1-10.0.0.9"},
		{name: "range reversed", in: "10.0.0.9-10.0.0.1", wantErr: true},
		{name: "range mixed", in: "10.0.0.1-2001:db8::1", wantErr: true},
		{name: "not host prefix", in: "10.0.0.0/31", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Range
			var err error
			if tc.cidr {
				r, err = ParseCIDR(tc.in)
			} else {
				r, err = ParseAddress(tc.in)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.norm {
				r.Text = ""
			}
			if err == nil && r.String() != tc.want {
				t.Errorf("got %s, want %s", r, tc.want)
			}
		})
	}
}

func TestOverlapAndAllocate(t *testing.T) {
	a, _ := ParseCIDR("10.200.0.0/24")
	b, _ := ParseCIDR("10.200.0.0/28")
	c, _ := ParseAddress("10.200.1.10-10.200.1.12")
	p1 := &Pool{Name: "a", Ranges: []Range{a}}
	p2 := &Pool{Name: "b", Ranges: []Range{b}}
	p3 := &Pool{Name: "c", Ranges: []Range{c}, AvoidBuggyIPs: true}
	if _, _, ok := p1.Overlap(p2); !ok {
		t.Error("10.200.0.0/24 and /28 should overlap")
	}
	if _, _, ok := p1.Overlap(p3); ok {
		t.Error("unexpected overlap")
	}
	if got := p1.Size().Int64(); got != 256 {
		t.Errorf("size = %d", got)
	}
	used := map[netip.Addr]bool{netip.MustParseAddr("10.200.0.0"): true, netip.MustParseAddr("10.200.0.1"): true}
	got, ok := p2.Allocate(4, func(a netip.Addr) bool { return used[a] })
	if !ok || got != netip.MustParseAddr("10.200.0.2") {
		t.Errorf("allocate = %v %v", got, ok)
	}
	if _, ok := p2.Allocate(6, func(netip.Addr) bool { return false }); ok {
		t.Error("allocated IPv6 from an IPv4 pool")
	}
	all := func(netip.Addr) bool { return true }
	if _, ok := p3.Allocate(4, all); ok {
		t.Error("allocated from a full pool")
	}
	buggy, _ := ParseAddress("10.0.0.255-10.0.1.1")
	p4 := &Pool{Ranges: []Range{buggy}, AvoidBuggyIPs: true}
	if got, _ := p4.Allocate(4, func(netip.Addr) bool { return false }); got != netip.MustParseAddr("10.0.1.1") {
		t.Errorf("avoidBuggyIPs: got %v", got)
	}
}
