package manager

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
)

// compiled is a checked node part, ready to be applied.
type compiled struct {
	node    *pb.NodeConfig
	vips    []vipPlan
	serving map[string]Verdict
	// warnings are problems that do not reject the snapshot, each naming
	// the VIP and field.
	warnings []string
}

// vipPlan is one assignment in an announced mode, checked.
type vipPlan struct {
	asg   *pb.VIPAssignment
	addrs []netip.Addr
	// bfd holds the session timers of a VIP with BFD enabled; nil without.
	bfd *bfd.SessionConfig
	// nodes are the heartbeat addresses of an L2ARP VIP's nodes, by name.
	nodes map[string]netip.Addr
}

// compile checks the node part of snap. Local assignments belong to the
// agent's LocalVIPs applier and are skipped.
func compile(snap *pb.ConfigSnapshot) (*compiled, error) {
	c := &compiled{node: snap.GetNode(), serving: Serving(snap.GetCluster())}
	var errs []error
	bad := func(vip, field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("vip %s: %s: %s", vip, field, fmt.Sprintf(format, args...)))
	}
	warn := func(vip, field, format string, args ...any) {
		c.warnings = append(c.warnings, fmt.Sprintf("vip %s: %s: %s", vip, field, fmt.Sprintf(format, args...)))
	}
	bgpCheck := newBGPCheck(bad)
	for _, a := range c.node.GetVips() {
		name := a.GetVip()
		switch a.GetMode() {
		case pb.VIPMode_VIP_MODE_LOCAL:
			continue
		case pb.VIPMode_VIP_MODE_L2ARP, pb.VIPMode_VIP_MODE_BGP, pb.VIPMode_VIP_MODE_OSPF:
		default:
			bad(name, "mode", "%s is not a mode this agent announces", a.GetMode())
			continue
		}
		v := vipPlan{asg: a}
		if len(a.GetAddresses()) == 0 {
			bad(name, "addresses", "none")
		}
		for i, s := range a.GetAddresses() {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				bad(name, fmt.Sprintf("addresses[%d]", i), "%q is not an IP address", s)
				continue
			}
			if err := checkVIPAddr(addr); err != nil {
				bad(name, fmt.Sprintf("addresses[%d]", i), "%s: %v", s, err)
				continue
			}
			v.addrs = append(v.addrs, addr)
		}
		for i, ifc := range a.GetInterfaces() {
			if err := checkInterfaceName(ifc); err != nil {
				bad(name, fmt.Sprintf("interfaces[%d]", i), "%q: %v", ifc, err)
			} else if ifc == "lo" && a.GetMode() == pb.VIPMode_VIP_MODE_L2ARP {
				bad(name, fmt.Sprintf("interfaces[%d]", i), "lo: an L2ARP VIP is bound on lo and announced on an Ethernet interface; name that one")
			}
		}
		switch a.GetMode() {
		case pb.VIPMode_VIP_MODE_L2ARP:
			if r := a.GetRole(); r != pb.VIPRole_VIP_ROLE_ACTIVE && r != pb.VIPRole_VIP_ROLE_STANDBY {
				bad(name, "role", "%s is not a role of an L2ARP VIP (ACTIVE or STANDBY)", r)
			}
			for _, n := range slices.Sorted(maps.Keys(a.GetNodeAddresses())) {
				s := a.GetNodeAddresses()[n]
				addr, err := netip.ParseAddr(s)
				if err != nil || addr.Zone() != "" || !addr.Unmap().IsGlobalUnicast() {
					bad(name, fmt.Sprintf("node_addresses[%s]", n), "%q is not a unicast IP address", s)
					continue
				}
				if v.nodes == nil {
					v.nodes = map[string]netip.Addr{}
				}
				v.nodes[n] = addr.Unmap()
			}
			if b := a.GetBfd(); b.GetEnabled() {
				cfg, err := sessionTimers(b)
				if err != nil {
					bad(name, "bfd", "%v", err)
				} else {
					v.bfd = &cfg
				}
			}
		case pb.VIPMode_VIP_MODE_BGP:
			if a.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE {
				bad(name, "role", "%s is not a role of a BGP VIP (ANNOUNCE)", a.GetRole())
			}
			bgpCheck.add(a)
			if b := a.GetBfd(); b.GetEnabled() {
				cfg, err := sessionTimers(b)
				if err != nil {
					bad(name, "bfd", "%v", err)
				} else {
					v.bfd = &cfg
				}
				if b.GetEchoMode() {
					warn(name, "bfd.echo_mode", "echo mode is not supported; the sessions run in asynchronous mode only")
				}
			}
		case pb.VIPMode_VIP_MODE_OSPF:
			if a.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE {
				bad(name, "role", "%s is not a role of an OSPF VIP (ANNOUNCE)", a.GetRole())
			}
			if a.GetOspf() == nil {
				bad(name, "ospf", "missing: an OSPF VIP needs its area")
			}
		}
		c.vips = append(c.vips, v)
	}
	return c, errors.Join(errs...)
}

// checkVIPAddr rejects addresses no node can announce.
func checkVIPAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return errors.New("an IPv6 zone is not allowed")
	case a.Is4In6():
		return fmt.Errorf("IPv4-mapped: write %s", a.Unmap())
	case a.IsUnspecified(), a.IsMulticast(), a.IsLoopback(), a.IsLinkLocalUnicast(),
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return errors.New("not a unicast address that can be announced")
	}
	return nil
}

// checkInterfaceName applies the kernel's rules for link names
// (dev_valid_name): 1 to 15 bytes, not "." or "..", no '/', ':' or
// white space.
func checkInterfaceName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > 15:
		return errors.New("longer than 15 bytes")
	case s == "." || s == "..":
		return errors.New("not a link name")
	case strings.ContainsAny(s, "/: \t\n\r\v\f\x00"):
		return errors.New("contains '/', ':' or white space")
	}
	return nil
}

// sessionTimers converts the snapshot's BFD settings into session timers,
// checking them as package bfd will.
func sessionTimers(b *pb.BFD) (bfd.SessionConfig, error) {
	var cfg bfd.SessionConfig
	if m := b.GetDetectMultiplier(); m > 255 {
		return cfg, fmt.Errorf("detect_multiplier %d: more than 255", m)
	} else {
		cfg.DetectMultiplier = uint8(m)
	}
	for _, f := range []struct {
		field string
		ms    uint32
		dst   *time.Duration
	}{
		{"desired_min_tx_ms", b.GetDesiredMinTxMs(), &cfg.DesiredMinTx},
		{"required_min_rx_ms", b.GetRequiredMinRxMs(), &cfg.RequiredMinRx},
	} {
		d := time.Duration(f.ms) * time.Millisecond
		if f.ms != 0 && d < bfd.MinInterval {
			return cfg, fmt.Errorf("%s %d: below the minimum of %v", f.field, f.ms, bfd.MinInterval)
		}
		*f.dst = d
	}
	return cfg, nil
}

// bgpCheck finds BGP settings that must agree between the VIPs of one node
// (one speaker: one local AS, one router ID, one session per peer).
type bgpCheck struct {
	bad         func(vip, field, format string, args ...any)
	localAS     uint32
	asOwner     string
	routerID    string
	idOwner     string
	peers       map[netip.Addr]*pb.BGPPeer
	peerOwner   map[netip.Addr]string
	peerBFD     map[netip.Addr]*pb.BFD
	peerBFDFrom map[netip.Addr]string
}

func newBGPCheck(bad func(vip, field, format string, args ...any)) *bgpCheck {
	return &bgpCheck{
		bad: bad, peers: map[netip.Addr]*pb.BGPPeer{}, peerOwner: map[netip.Addr]string{},
		peerBFD: map[netip.Addr]*pb.BFD{}, peerBFDFrom: map[netip.Addr]string{},
	}
}

func (c *bgpCheck) add(a *pb.VIPAssignment) {
	name, b := a.GetVip(), a.GetBgp()
	if b == nil {
		c.bad(name, "bgp", "missing: a BGP VIP needs its local AS and peers")
		return
	}
	switch {
	case b.GetLocalAs() == 0:
		c.bad(name, "bgp.local_as", "must not be zero")
	case c.asOwner == "":
		c.localAS, c.asOwner = b.GetLocalAs(), name
	case b.GetLocalAs() != c.localAS:
		c.bad(name, "bgp.local_as", "%d differs from %d of vip %s; a node speaks BGP as one AS", b.GetLocalAs(), c.localAS, c.asOwner)
	}
	if id := b.GetRouterId(); id != "" {
		addr, err := netip.ParseAddr(id)
		switch {
		case err != nil || !addr.Is4():
			c.bad(name, "bgp.router_id", "%q is not an IPv4 address", id)
		case c.idOwner == "":
			c.routerID, c.idOwner = id, name
		case id != c.routerID:
			c.bad(name, "bgp.router_id", "%s differs from %s of vip %s; a node has one router ID", id, c.routerID, c.idOwner)
		}
	}
	if len(b.GetPeers()) == 0 {
		c.bad(name, "bgp.peers", "none")
	}
	for i, p := range b.GetPeers() {
		field := fmt.Sprintf("bgp.peers[%d]", i)
		addr, err := netip.ParseAddr(p.GetAddress())
		if err != nil || addr.Zone() != "" {
			c.bad(name, field+".address", "%q is not an IP address", p.GetAddress())
			continue
		}
		addr = addr.Unmap()
		switch {
		case p.GetAs() == 0:
			c.bad(name, field+".as", "must not be zero")
		case p.GetPort() > 65535:
			c.bad(name, field+".port", "%d is out of range", p.GetPort())
		case p.GetEbgpMultihop() > 255:
			c.bad(name, field+".ebgp_multihop", "%d is more than 255", p.GetEbgpMultihop())
		case p.GetKeepaliveTimeMs() > 0 && p.GetHoldTimeMs() > 0 && p.GetKeepaliveTimeMs() > p.GetHoldTimeMs():
			c.bad(name, field+".keepalive_time_ms", "%d exceeds hold_time_ms %d", p.GetKeepaliveTimeMs(), p.GetHoldTimeMs())
		}
		if q, ok := c.peers[addr]; ok {
			if q.GetAs() != p.GetAs() || q.GetPort() != p.GetPort() || q.GetPassword() != p.GetPassword() || q.GetEbgpMultihop() != p.GetEbgpMultihop() {
				c.bad(name, field, "peer %s is configured differently by vip %s (AS, port, password or multihop); a node has one session per peer", addr, c.peerOwner[addr])
			}
		} else {
			c.peers[addr], c.peerOwner[addr] = p, name
		}
		if bf := a.GetBfd(); bf.GetEnabled() {
			if q, ok := c.peerBFD[addr]; ok {
				if q.GetDetectMultiplier() != bf.GetDetectMultiplier() || q.GetDesiredMinTxMs() != bf.GetDesiredMinTxMs() || q.GetRequiredMinRxMs() != bf.GetRequiredMinRxMs() {
					c.bad(name, "bfd", "peer %s has other BFD timers in vip %s; a node has one BFD session per peer", addr, c.peerBFDFrom[addr])
				}
			} else {
				c.peerBFD[addr], c.peerBFDFrom[addr] = bf, name
			}
		}
	}
}
