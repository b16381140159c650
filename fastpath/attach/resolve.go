package attach

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
)

var (
	// ErrUnsupportedInterface is returned (wrapped) by Resolve for a device
	// the fast path cannot serve: a loopback, a bridge, stacked VLANs, a bond
	// without slaves.
	ErrUnsupportedInterface = errors.New("interface unsupported by the xdp fast path")
	// ErrNoDefaultRoute is returned (wrapped) by Resolve when no interface
	// was named and neither an IPv4 nor an IPv6 default route exists.
	ErrNoDefaultRoute = errors.New("no default route")
)

// Target is one device the XDP program goes on, and why.
type Target struct {
	// Requested lists the names given to Resolve that led to this device, in
	// order; "" stands for the default route's interface.
	Requested []string
	// Ifname and Ifindex name the device the program is attached to.
	Ifname  string
	Ifindex int
	// Reasons says, for each entry of Requested, how it led here, e.g.
	// "vlan eth0.100 → eth0".
	Reasons []string
}

// String returns the device and the reasons, for logs and status output.
func (t Target) String() string {
	return fmt.Sprintf("%s (ifindex %d: %s)", t.Ifname, t.Ifindex, strings.Join(t.Reasons, "; "))
}

// Resolve turns interface names into the devices XDP runs on. No names means
// the interface of the IPv4 default route, else of the IPv6 one. A VLAN
// device resolves to its parent, because the program parses one VLAN tag
// itself and native XDP only runs on the real device; a bond resolves to all
// its slaves, because XDP must see the frames before bonding merges them. A
// loopback or a bridge is an error. Devices reached more than once are merged
// into one Target. Every problem found is reported, joined into one error.
func Resolve(names []string) ([]Target, error) {
	return resolve(netlinkSource{}, names)
}

// linkSource is the part of netlink Resolve reads, so the resolution rules
// can be tested against link attributes built by hand (VLAN and bond drivers
// cannot be loaded on every test machine).
type linkSource interface {
	LinkByName(name string) (netlink.Link, error)
	LinkByIndex(index int) (netlink.Link, error)
	LinkList() ([]netlink.Link, error)
	// RouteList returns the routes of the main table of one family.
	RouteList(family int) ([]netlink.Route, error)
}

type netlinkSource struct{}

func (netlinkSource) LinkByName(name string) (netlink.Link, error) { return netlink.LinkByName(name) }
func (netlinkSource) LinkByIndex(index int) (netlink.Link, error)  { return netlink.LinkByIndex(index) }
func (netlinkSource) LinkList() ([]netlink.Link, error)            { return netlink.LinkList() }
func (netlinkSource) RouteList(family int) ([]netlink.Route, error) {
	return netlink.RouteList(nil, family)
}

// leaf is a device XDP goes on, with the chain of steps that led to it.
type leaf struct {
	link  netlink.Link
	steps []string
}

func resolve(src linkSource, names []string) ([]Target, error) {
	var (
		targets []Target
		byIndex = map[int]int{}
		errs    []error
	)
	add := func(requested string, leaves []leaf) {
		for _, lf := range leaves {
			attrs := lf.link.Attrs()
			reason := strings.Join(lf.steps, ", ")
			i, ok := byIndex[attrs.Index]
			if !ok {
				byIndex[attrs.Index] = len(targets)
				targets = append(targets, Target{Ifname: attrs.Name, Ifindex: attrs.Index})
				i = len(targets) - 1
			}
			targets[i].Requested = append(targets[i].Requested, requested)
			targets[i].Reasons = append(targets[i].Reasons, reason)
		}
	}

	if len(names) == 0 {
		hops, err := defaultRouteLinks(src)
		if err != nil {
			return nil, err
		}
		for _, h := range hops {
			l, err := src.LinkByIndex(h.ifindex)
			if err != nil {
				errs = append(errs, fmt.Errorf("interface of the %s (ifindex %d): %w", h.why, h.ifindex, err))
				continue
			}
			leaves, err := expand(src, l, []string{fmt.Sprintf("%s dev %s", h.why, l.Attrs().Name)}, 0)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", h.why, err))
				continue
			}
			add("", leaves)
		}
	}

	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		l, err := src.LinkByName(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("interface %q: %w", name, err))
			continue
		}
		leaves, err := expand(src, l, nil, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		add(name, leaves)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("resolve xdp interfaces: %w", err)
	}
	return targets, nil
}

// maxDepth bounds expand: real stacks are at most bond → VLAN deep, and a
// loop in the link attributes must not hang the agent.
const maxDepth = 4

// expand follows l down to the devices XDP must run on.
func expand(src linkSource, l netlink.Link, steps []string, depth int) ([]leaf, error) {
	attrs := l.Attrs()
	name := attrs.Name
	if depth > maxDepth {
		return nil, fmt.Errorf("interface %s: devices stacked more than %d deep: %w", name, maxDepth, ErrUnsupportedInterface)
	}
	switch {
	case attrs.Flags&net.FlagLoopback != 0 || attrs.EncapType == "loopback":
		return nil, fmt.Errorf("interface %s is a loopback device, which never carries the traffic the load balancer serves: %w",
			name, ErrUnsupportedInterface)
	case l.Type() == "bridge":
		return nil, fmt.Errorf("interface %s is a bridge: XDP on a bridge misses the frames it forwards between ports and runs in generic mode only; name its ports instead: %w",
			name, ErrUnsupportedInterface)
	case l.Type() == "vlan":
		parent, err := src.LinkByIndex(attrs.ParentIndex)
		if err != nil {
			return nil, fmt.Errorf("parent (ifindex %d) of vlan %s: %w", attrs.ParentIndex, name, err)
		}
		if parent.Type() == "vlan" {
			return nil, fmt.Errorf("vlan %s sits on vlan %s: the fast path parses one VLAN tag, not stacked (QinQ) tags: %w",
				name, parent.Attrs().Name, ErrUnsupportedInterface)
		}
		return expand(src, parent, append(slices.Clone(steps), fmt.Sprintf("vlan %s → %s", name, parent.Attrs().Name)), depth+1)
	case l.Type() == "bond":
		all, err := src.LinkList()
		if err != nil {
			return nil, fmt.Errorf("list slaves of bond %s: %w", name, err)
		}
		var out []leaf
		for _, s := range all {
			if s.Attrs().MasterIndex != attrs.Index {
				continue
			}
			leaves, err := expand(src, s, append(slices.Clone(steps), fmt.Sprintf("bond %s → slave %s", name, s.Attrs().Name)), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, leaves...)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("bond %s has no slave devices to attach to: %w", name, ErrUnsupportedInterface)
		}
		return out, nil
	default:
		if len(steps) == 0 {
			steps = []string{"requested"}
		}
		return []leaf{{link: l, steps: steps}}, nil
	}
}

// hop is an interface a default route leaves through.
type hop struct {
	ifindex int
	why     string
}

// defaultRouteLinks returns the interfaces of the best (lowest metric) IPv4
// default route, or of the IPv6 one when there is no IPv4 default route. A
// multipath route yields each of its nexthops' interfaces.
func defaultRouteLinks(src linkSource) ([]hop, error) {
	for _, fam := range []struct {
		family int
		name   string
	}{{netlink.FAMILY_V4, "IPv4"}, {netlink.FAMILY_V6, "IPv6"}} {
		routes, err := src.RouteList(fam.family)
		if err != nil {
			return nil, fmt.Errorf("list %s routes: %w", fam.name, err)
		}
		var best *netlink.Route
		for i := range routes {
			r := &routes[i]
			if !isDefault(r) {
				continue
			}
			if best == nil || r.Priority < best.Priority {
				best = r
			}
		}
		if best == nil {
			continue
		}
		why := fam.name + " default route"
		var hops []hop
		if best.LinkIndex > 0 {
			hops = append(hops, hop{best.LinkIndex, why})
		}
		for _, nh := range best.MultiPath {
			if nh.LinkIndex > 0 && !slices.ContainsFunc(hops, func(h hop) bool { return h.ifindex == nh.LinkIndex }) {
				hops = append(hops, hop{nh.LinkIndex, why + " nexthop"})
			}
		}
		if len(hops) == 0 {
			return nil, fmt.Errorf("%s has no outgoing interface: %w", why, ErrNoDefaultRoute)
		}
		return hops, nil
	}
	return nil, fmt.Errorf("no interface named and no IPv4 or IPv6 default route to pick one (name one with --interface): %w", ErrNoDefaultRoute)
}

// rtnUnicast is RTN_UNICAST: blackhole, unreachable and prohibit default
// routes do not lead out of an interface.
const rtnUnicast = 1

func isDefault(r *netlink.Route) bool {
	if r.Type != 0 && r.Type != rtnUnicast {
		return false
	}
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0 && r.Dst.IP.IsUnspecified()
}
