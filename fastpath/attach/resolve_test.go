package attach

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
)

// fakeLinks serves link attributes built by hand: this kernel cannot create
// VLAN or bond devices (no 8021q or bonding module), so the rules for them
// are tested against the attributes netlink would report.
type fakeLinks struct {
	links  []netlink.Link
	routes map[int][]netlink.Route
}

func (f *fakeLinks) LinkByName(name string) (netlink.Link, error) {
	for _, l := range f.links {
		if l.Attrs().Name == name {
			return l, nil
		}
	}
	return nil, netlink.LinkNotFoundError{}
}

func (f *fakeLinks) LinkByIndex(index int) (netlink.Link, error) {
	for _, l := range f.links {
		if l.Attrs().Index == index {
			return l, nil
		}
	}
	return nil, netlink.LinkNotFoundError{}
}

func (f *fakeLinks) LinkList() ([]netlink.Link, error) { return f.links, nil }

func (f *fakeLinks) RouteList(family int) ([]netlink.Route, error) { return f.routes[family], nil }

func attrs(index int, name string) netlink.LinkAttrs {
	return netlink.LinkAttrs{Index: index, Name: name, Flags: net.FlagUp}
}

func enslaved(index int, name string, master int) netlink.LinkAttrs {
	a := attrs(index, name)
	a.MasterIndex = master
	return a
}

func vlanOn(index int, name string, parent int) netlink.Link {
	a := attrs(index, name)
	a.ParentIndex = parent
	return &netlink.Vlan{LinkAttrs: a, VlanId: 100}
}

// host is a machine with most of what Resolve meets in the field.
func host() *fakeLinks {
	lo := attrs(1, "lo")
	lo.Flags |= net.FlagLoopback
	lo.EncapType = "loopback"
	return &fakeLinks{links: []netlink.Link{
		&netlink.Device{LinkAttrs: lo},
		&netlink.Device{LinkAttrs: attrs(2, "eth0")},
		vlanOn(3, "eth0.100", 2),
		&netlink.Bond{LinkAttrs: attrs(4, "bond0")},
		&netlink.Device{LinkAttrs: enslaved(5, "eth1", 4)},
		&netlink.Device{LinkAttrs: enslaved(6, "eth2", 4)},
		vlanOn(7, "bond0.200", 4),
		&netlink.Bridge{LinkAttrs: attrs(8, "br0")},
		&netlink.Device{LinkAttrs: enslaved(9, "eth3", 8)},
		vlanOn(10, "br0.5", 8),
		vlanOn(11, "eth0.100.7", 3),
		&netlink.Bond{LinkAttrs: attrs(12, "bond1")},
		&netlink.Veth{LinkAttrs: attrs(13, "veth0")},
	}}
}

func defaultVia(index int, metric int) netlink.Route {
	return netlink.Route{LinkIndex: index, Priority: metric, Type: rtnUnicast,
		Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
}

func TestResolveRules(t *testing.T) {
	tests := []struct {
		name    string
		names   []string
		routes  map[int][]netlink.Route
		want    []Target
		wantErr []string // substrings of the error; nil means success
	}{
		{
			name:  "plain device",
			names: []string{"eth0"},
			want:  []Target{{Requested: []string{"eth0"}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"requested"}}},
		},
		{
			name:  "vlan resolves to its parent",
			names: []string{"eth0.100"},
			want:  []Target{{Requested: []string{"eth0.100"}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"vlan eth0.100 → eth0"}}},
		},
		{
			name:  "bond resolves to its slaves",
			names: []string{"bond0"},
			want: []Target{
				{Requested: []string{"bond0"}, Ifname: "eth1", Ifindex: 5, Reasons: []string{"bond bond0 → slave eth1"}},
				{Requested: []string{"bond0"}, Ifname: "eth2", Ifindex: 6, Reasons: []string{"bond bond0 → slave eth2"}},
			},
		},
		{
			name:  "vlan on a bond resolves to the slaves",
			names: []string{"bond0.200"},
			want: []Target{
				{Requested: []string{"bond0.200"}, Ifname: "eth1", Ifindex: 5, Reasons: []string{"vlan bond0.200 → bond0, bond bond0 → slave eth1"}},
				{Requested: []string{"bond0.200"}, Ifname: "eth2", Ifindex: 6, Reasons: []string{"vlan bond0.200 → bond0, bond bond0 → slave eth2"}},
			},
		},
		{
			name:  "duplicates after resolution merge",
			names: []string{"eth0.100", "eth0", "eth1", "bond0", "eth0"},
			want: []Target{
				{Requested: []string{"eth0.100", "eth0"}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"vlan eth0.100 → eth0", "requested"}},
				{Requested: []string{"eth1", "bond0"}, Ifname: "eth1", Ifindex: 5, Reasons: []string{"requested", "bond bond0 → slave eth1"}},
				{Requested: []string{"bond0"}, Ifname: "eth2", Ifindex: 6, Reasons: []string{"bond bond0 → slave eth2"}},
			},
		},
		{
			name:   "default route",
			routes: map[int][]netlink.Route{netlink.FAMILY_V4: {{LinkIndex: 13, Dst: &net.IPNet{IP: net.IPv4(10, 0, 0, 0), Mask: net.CIDRMask(8, 32)}}, defaultVia(13, 0)}},
			want:   []Target{{Requested: []string{""}, Ifname: "veth0", Ifindex: 13, Reasons: []string{"IPv4 default route dev veth0"}}},
		},
		{
			name: "lowest metric default route wins",
			routes: map[int][]netlink.Route{netlink.FAMILY_V4: {
				defaultVia(2, 200), defaultVia(13, 100),
				{LinkIndex: 1, Type: 6 /* RTN_UNREACHABLE */, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}},
			}},
			want: []Target{{Requested: []string{""}, Ifname: "veth0", Ifindex: 13, Reasons: []string{"IPv4 default route dev veth0"}}},
		},
		{
			name:   "default route over a vlan",
			routes: map[int][]netlink.Route{netlink.FAMILY_V4: {defaultVia(3, 0)}},
			want:   []Target{{Requested: []string{""}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"IPv4 default route dev eth0.100, vlan eth0.100 → eth0"}}},
		},
		{
			name: "ipv6 default route when there is no ipv4 one",
			routes: map[int][]netlink.Route{netlink.FAMILY_V6: {{LinkIndex: 2, Type: rtnUnicast,
				Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}}},
			want: []Target{{Requested: []string{""}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"IPv6 default route dev eth0"}}},
		},
		{
			name: "multipath default route",
			routes: map[int][]netlink.Route{netlink.FAMILY_V4: {{Type: rtnUnicast, MultiPath: []*netlink.NexthopInfo{
				{LinkIndex: 2}, {LinkIndex: 13},
			}}}},
			want: []Target{
				{Requested: []string{""}, Ifname: "eth0", Ifindex: 2, Reasons: []string{"IPv4 default route nexthop dev eth0"}},
				{Requested: []string{""}, Ifname: "veth0", Ifindex: 13, Reasons: []string{"IPv4 default route nexthop dev veth0"}},
			},
		},
		{name: "no default route", wantErr: []string{"no IPv4 or IPv6 default route"}},
		{name: "loopback rejected", names: []string{"lo"}, wantErr: []string{"interface lo is a loopback device"}},
		{name: "bridge rejected", names: []string{"br0"}, wantErr: []string{"interface br0 is a bridge"}},
		{name: "vlan on a bridge rejected", names: []string{"br0.5"}, wantErr: []string{"interface br0 is a bridge"}},
		{name: "stacked vlans rejected", names: []string{"eth0.100.7"}, wantErr: []string{"vlan eth0.100.7 sits on vlan eth0.100", "QinQ"}},
		{name: "bond without slaves rejected", names: []string{"bond1"}, wantErr: []string{"bond bond1 has no slave devices"}},
		{name: "unknown interface", names: []string{"nope"}, wantErr: []string{`interface "nope"`}},
		{
			name:    "every problem reported",
			names:   []string{"lo", "eth0", "br0"},
			wantErr: []string{"interface lo is a loopback", "interface br0 is a bridge"},
		},
		{
			name:    "default route over a bridge rejected",
			routes:  map[int][]netlink.Route{netlink.FAMILY_V4: {defaultVia(8, 0)}},
			wantErr: []string{"IPv4 default route", "interface br0 is a bridge"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := host()
			src.routes = tc.routes
			got, err := resolve(src, tc.names)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("resolve(%q) = %v, want an error", tc.names, got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve(%q): %v", tc.names, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resolve(%q) (-want +got):\n%s", tc.names, diff)
			}
		})
	}
}

func TestResolveSentinels(t *testing.T) {
	src := host()
	if _, err := resolve(src, []string{"br0"}); !errors.Is(err, ErrUnsupportedInterface) {
		t.Errorf("bridge: %v, want ErrUnsupportedInterface", err)
	}
	if _, err := resolve(src, nil); !errors.Is(err, ErrNoDefaultRoute) {
		t.Errorf("no route: %v, want ErrNoDefaultRoute", err)
	}
}

// TestResolveKernel runs Resolve against a real namespace: veth, loopback,
// bridge and default routes.
func TestResolveKernel(t *testing.T) {
	type setup func(t *testing.T, p *pair)
	addRoute := func(dst string, gw string) setup {
		return func(t *testing.T, p *pair) {
			_, ipnet, err := net.ParseCIDR(dst)
			if err != nil {
				t.Fatal(err)
			}
			l := p.b.link(t, p.nameB)
			if strings.Contains(dst, ":") {
				if err := p.b.h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fd77::2"), Mask: net.CIDRMask(64, 128)}, Flags: 0x80 /* IFA_F_NODAD */}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.b.h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipnet, Gw: net.ParseIP(gw)}); err != nil {
				t.Fatalf("add route %s via %s: %v", dst, gw, err)
			}
		}
	}
	addBridge := func(t *testing.T, p *pair) {
		if err := p.b.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "fpat-br"}}); err != nil {
			t.Fatalf("create bridge: %v", err)
		}
	}
	tests := []struct {
		name    string
		setup   []setup
		names   []string
		want    []string // Ifname + " " + reasons
		wantErr error
	}{
		{name: "ipv4 default route", setup: []setup{addRoute("0.0.0.0/0", "10.77.0.1")}, want: []string{"fpat-b IPv4 default route dev fpat-b"}},
		{name: "ipv6 default route", setup: []setup{addRoute("::/0", "fd77::1")}, want: []string{"fpat-b IPv6 default route dev fpat-b"}},
		{name: "no default route", wantErr: ErrNoDefaultRoute},
		{name: "named veth, twice", names: []string{"fpat-b", "fpat-b"}, want: []string{"fpat-b requested"}},
		{name: "loopback rejected", names: []string{"lo"}, wantErr: ErrUnsupportedInterface},
		{name: "bridge rejected", setup: []setup{addBridge}, names: []string{"fpat-br"}, wantErr: ErrUnsupportedInterface},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t)
			for _, s := range tc.setup {
				s(t, p)
			}
			var got []Target
			err := p.b.run(func() error {
				var err error
				got, err = Resolve(tc.names)
				return err
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Resolve(%q) = %v, %v; want %v", tc.names, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.names, err)
			}
			var short []string
			for _, tg := range got {
				if tg.Ifindex != p.b.link(t, tg.Ifname).Attrs().Index {
					t.Errorf("%s: ifindex %d is not the interface's", tg.Ifname, tg.Ifindex)
				}
				short = append(short, tg.Ifname+" "+strings.Join(tg.Reasons, "; "))
			}
			if diff := cmp.Diff(tc.want, short); diff != "" {
				t.Errorf("Resolve(%q) (-want +got):\n%s", tc.names, diff)
			}
		})
	}
}
