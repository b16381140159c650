package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Defaults of the peer settings left zero.
const (
	DefaultPort     = 179
	DefaultHoldTime = 90 * time.Second
)

// Desired is the complete state a [Speaker] should have. The zero value
// (LocalAS 0) means no BGP at all: every peer is deleted.
type Desired struct {
	// LocalAS is the node's AS number. Zero stops the speaker.
	LocalAS uint32
	// RouterID is the node's BGP identifier: an IPv4 address unique among
	// the routers' peers. Required when LocalAS is set.
	RouterID netip.Addr
	// Peers are the sessions to keep, one per address.
	Peers []Peer
	// Routes are the host routes to announce, one per prefix.
	Routes []Route
}

// Peer is one BGP neighbour.
type Peer struct {
	// Address of the peer; its family decides the routes the session
	// carries (IPv4 routes to IPv4 peers, IPv6 routes to IPv6 peers).
	Address netip.Addr
	// AS of the peer: the node's own for iBGP, another for eBGP.
	AS uint32
	// Port of the peer's BGP listener. Zero means 179.
	Port uint16
	// Password for TCP MD5 signatures (RFC 2385). Empty means none.
	Password string
	// EBGPMultihop is the TTL of eBGP packets for peers that are not
	// directly connected. Zero means directly connected (TTL 1).
	EBGPMultihop uint8
	// HoldTime proposed for the session, rounded up to whole seconds (the
	// protocol's unit) and to at least 3s. Zero means 90s.
	HoldTime time.Duration
	// KeepaliveTime between keepalives, rounded up to whole seconds. Zero
	// means a third of HoldTime.
	KeepaliveTime time.Duration
	// GracefulRestart asks the peer to keep this node's routes through a
	// restart of the speaker (RFC 4724), and helps the peer through its own.
	GracefulRestart bool
	// LocalAddress is the source address of the session. Zero lets the
	// kernel choose by its routes.
	LocalAddress netip.Addr
}

// Route is one announced host route.
type Route struct {
	// VIP is the name of the VIP the route belongs to, for state and logs.
	VIP string
	// Prefix is a /32 or /128.
	Prefix netip.Prefix
	// Communities are "ASN:value" or a well-known name: no-export,
	// no-advertise, local-as (no-export-subconfed), no-peer, blackhole,
	// graceful-shutdown.
	Communities []string
	// LargeCommunities are "ASN:x:y" (RFC 8092).
	LargeCommunities []string
	// LocalPreference is sent to iBGP peers only. Nil sends none (the
	// router uses its default, 100 usually).
	LocalPreference *uint32
	// MED (multi-exit discriminator). Nil sends none.
	MED *uint32
}

// FromNode builds the desired state from the node part of a snapshot: the
// BGP-mode assignments with role ANNOUNCE. Every one configures the
// speaker (local AS, router ID, peers); the routes are those of the
// assignments include accepts (nil includes all of them; the caller leaves
// out a VIP to withdraw it, e.g. when it has no healthy backend, and the
// sessions stay up).
// routerID is the node's own router ID (by default its IPv4 address), used
// unless an assignment carries one of its own.
//
// The snapshot builder has already rejected VIPs that disagree on the local
// AS or on a peer's AS, port, password or multihop. What it lets through
// and FromNode must still settle is returned as problems, each naming the
// VIP and field: settings that differ between VIPs on one node (a peer's
// timers or graceful restart, router IDs, the attributes of one prefix) are
// taken from the first VIP by name; a VIP whose local AS differs is left
// out; an address of a family no peer carries is not announced.
func FromNode(node *pb.NodeConfig, routerID netip.Addr, include func(*pb.VIPAssignment) bool) (Desired, []error) {
	var d Desired
	var problems []error
	problem := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	peers := map[netip.Addr]int{}
	peerOwner := map[netip.Addr]string{}
	routes := map[netip.Prefix]int{}
	routerIDOwner := ""
	if node == nil {
		return d, nil
	}
	for _, a := range node.GetVips() {
		b := a.GetBgp()
		if a.GetMode() != pb.VIPMode_VIP_MODE_BGP || a.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE || b == nil {
			continue
		}
		announce := include == nil || include(a)
		if d.LocalAS == 0 {
			d.LocalAS = b.GetLocalAs()
		} else if b.GetLocalAs() != d.LocalAS {
			problem("vip %s: bgp.local_as %d differs from %d of the other VIPs on this node: not announced", a.GetVip(), b.GetLocalAs(), d.LocalAS)
			continue
		}
		if id := b.GetRouterId(); id != "" {
			addr, err := netip.ParseAddr(id)
			switch {
			case err != nil || !addr.Is4():
				problem("vip %s: bgp.router_id %q is not an IPv4 address: ignored", a.GetVip(), id)
			case routerIDOwner == "":
				d.RouterID, routerIDOwner = addr, a.GetVip()
			case addr != d.RouterID:
				problem("vip %s: bgp.router_id %s differs from %s set by vip %s: ignored", a.GetVip(), addr, d.RouterID, routerIDOwner)
			}
		}
		for _, p := range b.GetPeers() {
			peer, err := peerFromProto(p)
			if err != nil {
				problem("vip %s: bgp.peers %s: %w", a.GetVip(), p.GetAddress(), err)
				continue
			}
			if i, ok := peers[peer.Address]; ok {
				if d.Peers[i] != peer {
					problem("vip %s: bgp.peers %s is configured differently by vip %s: the settings of vip %s apply", a.GetVip(), peer.Address, peerOwner[peer.Address], peerOwner[peer.Address])
				}
				continue
			}
			peers[peer.Address], peerOwner[peer.Address] = len(d.Peers), a.GetVip()
			d.Peers = append(d.Peers, peer)
		}
		if !announce {
			continue
		}
		for _, s := range a.GetAddresses() {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				problem("vip %s: address %q: %w", a.GetVip(), s, err)
				continue
			}
			r := Route{
				VIP:              a.GetVip(),
				Prefix:           netip.PrefixFrom(addr, addr.BitLen()),
				Communities:      slices.Clone(b.GetCommunities()),
				LargeCommunities: slices.Clone(b.GetLargeCommunities()),
			}
			if b.GetHasLocalPreference() {
				v := b.GetLocalPreference()
				r.LocalPreference = &v
			}
			if b.GetHasMed() {
				v := b.GetMed()
				r.MED = &v
			}
			if _, err := r.attributes(); err != nil {
				problem("vip %s: %w: not announced", a.GetVip(), err)
				continue
			}
			if i, ok := routes[r.Prefix]; ok {
				if !r.sameAttributes(d.Routes[i]) {
					problem("vip %s: %s is announced with other attributes by vip %s: those apply", a.GetVip(), r.Prefix, d.Routes[i].VIP)
				}
				continue
			}
			routes[r.Prefix] = len(d.Routes)
			d.Routes = append(d.Routes, r)
		}
	}
	if d.LocalAS == 0 {
		return Desired{}, problems
	}
	if !d.RouterID.IsValid() {
		d.RouterID = routerID
	}
	if !d.RouterID.Is4() {
		problem("no router ID: the node has no IPv4 address and no VIP sets bgp.router_id; set the agent's router ID")
	}
	for _, r := range d.Routes {
		if !slices.ContainsFunc(d.Peers, func(p Peer) bool { return p.Address.Is4() == r.Prefix.Addr().Is4() }) {
			problem("vip %s: %s has no %s peer to be announced to", r.VIP, r.Prefix, family(r.Prefix.Addr()))
		}
	}
	slices.SortFunc(d.Peers, func(x, y Peer) int { return x.Address.Compare(y.Address) })
	slices.SortFunc(d.Routes, func(x, y Route) int { return cmp.Compare(x.Prefix.String(), y.Prefix.String()) })
	return d, problems
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func peerFromProto(p *pb.BGPPeer) (Peer, error) {
	addr, err := netip.ParseAddr(p.GetAddress())
	if err != nil {
		return Peer{}, fmt.Errorf("address: %w", err)
	}
	if p.GetAs() == 0 {
		return Peer{}, fmt.Errorf("as: must not be zero")
	}
	if p.GetPort() > 65535 {
		return Peer{}, fmt.Errorf("port %d: out of range", p.GetPort())
	}
	if p.GetEbgpMultihop() > 255 {
		return Peer{}, fmt.Errorf("ebgp_multihop %d: more than 255", p.GetEbgpMultihop())
	}
	return Peer{
		Address:         addr.Unmap(),
		AS:              p.GetAs(),
		Port:            uint16(p.GetPort()),
		Password:        p.GetPassword(),
		EBGPMultihop:    uint8(p.GetEbgpMultihop()),
		HoldTime:        time.Duration(p.GetHoldTimeMs()) * time.Millisecond,
		KeepaliveTime:   time.Duration(p.GetKeepaliveTimeMs()) * time.Millisecond,
		GracefulRestart: p.GetGracefulRestart(),
	}, nil
}

// check validates d before anything is applied.
func (d *Desired) check() error {
	if d.LocalAS == 0 {
		return nil
	}
	if !d.RouterID.Is4() {
		return fmt.Errorf("router id %v: must be an IPv4 address", d.RouterID)
	}
	seen := map[netip.Addr]bool{}
	for i, p := range d.Peers {
		switch {
		case !p.Address.IsValid():
			return fmt.Errorf("peers[%d].address: missing", i)
		case seen[p.Address.Unmap()]:
			return fmt.Errorf("peers[%d].address %s: listed twice", i, p.Address)
		case p.AS == 0:
			return fmt.Errorf("peers[%d].as: must not be zero", i)
		case p.HoldTime < 0 || p.KeepaliveTime < 0:
			return fmt.Errorf("peers[%d]: negative timer", i)
		case p.KeepaliveTime > 0 && p.HoldTime > 0 && p.KeepaliveTime > p.HoldTime:
			return fmt.Errorf("peers[%d].keepalive_time %v: exceeds hold time %v", i, p.KeepaliveTime, p.HoldTime)
		case p.LocalAddress.IsValid() && p.LocalAddress.Unmap().Is4() != p.Address.Unmap().Is4():
			return fmt.Errorf("peers[%d].local_address %s: not of the peer's family", i, p.LocalAddress)
		}
		seen[p.Address.Unmap()] = true
	}
	routes := map[netip.Prefix]bool{}
	for i, r := range d.Routes {
		if !r.Prefix.IsValid() || r.Prefix.Bits() != r.Prefix.Addr().BitLen() {
			return fmt.Errorf("routes[%d].prefix %v: must be a /32 or /128", i, r.Prefix)
		}
		if routes[r.Prefix] {
			return fmt.Errorf("routes[%d].prefix %v: listed twice", i, r.Prefix)
		}
		routes[r.Prefix] = true
		if _, err := r.attributes(); err != nil {
			return fmt.Errorf("routes[%d]: %w", i, err)
		}
	}
	return nil
}

// holdAndKeepalive returns the peer's timers in whole seconds as the
// protocol carries them: hold rounded up and at least 3 (RFC 4271 §4.2
// allows 0 or ≥3; 0 disables keepalives, which NovaEdge never wants),
// keepalive rounded up and at least 1.
func (p Peer) holdAndKeepalive() (hold, keepalive uint64) {
	h := cmp.Or(p.HoldTime, DefaultHoldTime)
	hold = max(uint64((h+time.Second-1)/time.Second), 3)
	k := p.KeepaliveTime
	if k == 0 {
		k = time.Duration(hold) * time.Second / 3
	}
	keepalive = max(uint64((k+time.Second-1)/time.Second), 1)
	return hold, min(keepalive, hold)
}
