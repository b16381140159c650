package manager

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/bfdd"
	"github.com/novaedge/novaedge/vip/bgp"
	"github.com/novaedge/novaedge/vip/frr"
	"github.com/novaedge/novaedge/vip/l2"
)

// VIPState is one VIP's announcement as last applied.
type VIPState struct {
	VIP        string
	Mode       pb.VIPMode
	Role       pb.VIPRole
	Addresses  []netip.Addr
	Interfaces []string
	// Announced is true when the node claims the VIP (L2ARP active) or
	// advertises its routes (BGP).
	Announced bool
	// Reason says why it is not announced.
	Reason string
	BFD    bool
}

// BGPState is the speaker's state.
type BGPState struct {
	Running    bool
	LocalAS    uint32
	RouterID   netip.Addr
	Restarting bool
	Peers      []bgp.PeerState
	Routes     []bgp.Route
	// Error of the last reconcile or state query.
	Error string
}

// BFDState is the BFD speaker's state.
type BFDState struct {
	Running bool
	// Error says why the speaker could not start.
	Error    string
	Sessions []bfd.SessionState
	// Speaker is "embedded" or "novaedge-bfdd <socket>"; Problem what
	// keeps the daemon's sessions from running.
	Speaker, Problem string
}

// State is what the manager announces and how its protocols are doing.
type State struct {
	VIPs    []VIPState
	L2      l2.Counters
	L2Lease time.Time
	BGP     BGPState
	BFD     BFDState
	OSPF    OSPFState
	// Problems of the last apply that did not fail it, each naming the
	// VIP and field.
	Problems []string
}

// State returns the current state.
func (m *Manager) State(ctx context.Context) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := State{
		VIPs:     slices.Clone(m.vips),
		Problems: slices.Clone(m.problems),
		BGP:      BGPState{Error: m.bgpErr},
	}
	if m.l2 != nil {
		st.L2, st.L2Lease = m.l2.Counters(), m.l2.Lease()
	}
	if m.bgp != nil {
		st.BGP.Running = true
		st.BGP.LocalAS, st.BGP.RouterID = m.bgpDesired.LocalAS, m.bgpDesired.RouterID
		st.BGP.Restarting = m.bgpRestarting
		st.BGP.Routes = m.bgp.Routes()
		peers, err := m.bgp.Peers(ctx)
		if err != nil && st.BGP.Error == "" {
			st.BGP.Error = err.Error()
		}
		st.BGP.Peers = peers
	}
	var speakers, errs []string
	if sp := m.bgpBFD.sp; sp != nil {
		st.BFD.Sessions = append(st.BFD.Sessions, sp.Sessions()...)
		name := "embedded"
		switch c := sp.(type) {
		case *bfdd.Client:
			name, st.BFD.Problem = "novaedge-bfdd "+c.Socket(), c.Problem()
		case *frr.BFDPeers:
			name = "FRR bfdd"
		}
		speakers = append(speakers, name)
	}
	if sp := m.hbBFD.sp; sp != nil {
		st.BFD.Sessions = append(st.BFD.Sessions, sp.Sessions()...)
		speakers = append(speakers, fmt.Sprintf("L2 heartbeats: embedded, UDP %d", m.heartbeatPort()))
	}
	if m.bgpBFD.err != "" {
		errs = append(errs, m.bgpBFD.err)
	}
	if m.hbBFD.err != "" {
		errs = append(errs, "l2 heartbeats: "+m.hbBFD.err)
	}
	st.BFD.Running = len(speakers) > 0
	st.BFD.Speaker, st.BFD.Error = strings.Join(speakers, "; "), strings.Join(errs, "; ")
	if m.ospf != nil {
		st.OSPF = m.ospfState(ctx, st.VIPs)
	} else {
		st.OSPF.Error = m.ospfErr
	}
	return st
}

// VIPStatus returns State in the admin API's form.
func (m *Manager) VIPStatus(ctx context.Context) (*pb.VIPStatusResponse, error) {
	return StatusProto(m.State(ctx)), nil
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func shortName(s string, prefix string) string { return strings.TrimPrefix(s, prefix) }

// StatusProto converts st for the admin API.
func StatusProto(st State) *pb.VIPStatusResponse {
	out := &pb.VIPStatusResponse{
		Enabled: true,
		L2: &pb.L2Counters{
			Garps: st.L2.GARPs, UnsolicitedNas: st.L2.UnsolicitedNAs, ArpReplies: st.L2.ARPReplies,
			SolicitedNas: st.L2.SolicitedNAs, Suppressed: st.L2.Suppressed, Conflicts: st.L2.Conflicts,
		},
		L2LeaseUntilUnixMs: unixMillis(st.L2Lease),
		Errors:             slices.Clone(st.Problems),
		Bgp: &pb.BGPStatus{
			Running: st.BGP.Running, LocalAs: st.BGP.LocalAS, Restarting: st.BGP.Restarting, Error: st.BGP.Error,
		},
		Bfd:  &pb.BFDStatus{Running: st.BFD.Running, Error: st.BFD.Error, Speaker: st.BFD.Speaker, Problem: st.BFD.Problem},
		Ospf: ospfStatusProto(st.OSPF),
	}
	if st.BGP.RouterID.IsValid() {
		out.Bgp.RouterId = st.BGP.RouterID.String()
	}
	for _, v := range st.VIPs {
		s := &pb.VIPAnnouncementStatus{
			Vip: v.VIP, Mode: shortName(v.Mode.String(), "VIP_MODE_"), Role: shortName(v.Role.String(), "VIP_ROLE_"),
			Interfaces: slices.Clone(v.Interfaces), Announced: v.Announced, Reason: v.Reason, Bfd: v.BFD,
		}
		for _, a := range v.Addresses {
			s.Addresses = append(s.Addresses, a.String())
		}
		out.Vips = append(out.Vips, s)
	}
	for _, p := range st.BGP.Peers {
		out.Bgp.Peers = append(out.Bgp.Peers, &pb.BGPPeerStatus{
			Address: p.Peer.Address.String(), As: p.Peer.AS, Port: uint32(p.Peer.Port), State: string(p.State),
			ShutDown: p.ShutDown, EstablishedSinceUnixMs: unixMillis(p.EstablishedSince), RemoteRouterId: p.RemoteRouterID,
			Received: p.Received, Accepted: p.Accepted, Advertised: p.Advertised,
			LastError: p.LastError, LastErrorAtUnixMs: unixMillis(p.LastErrorAt), GracefulRestart: p.Peer.GracefulRestart,
		})
	}
	for _, r := range st.BGP.Routes {
		rs := &pb.BGPRouteStatus{
			Vip: r.VIP, Prefix: r.Prefix.String(),
			Communities: slices.Clone(r.Communities), LargeCommunities: slices.Clone(r.LargeCommunities),
		}
		if r.LocalPreference != nil {
			rs.HasLocalPreference, rs.LocalPreference = true, *r.LocalPreference
		}
		if r.MED != nil {
			rs.HasMed, rs.Med = true, *r.MED
		}
		out.Bgp.Routes = append(out.Bgp.Routes, rs)
	}
	for _, s := range st.BFD.Sessions {
		out.Bfd.Sessions = append(out.Bfd.Sessions, &pb.BFDSessionStatus{
			Peer: s.Peer.String(), Local: s.Local.String(), Interface: s.Interface,
			State: s.State.String(), RemoteState: s.RemoteState.String(), Diag: s.Diag.String(),
			DetectMultiplier: uint32(s.Config.DetectMultiplier),
			TxIntervalMs:     uint32(s.TxInterval / time.Millisecond), DetectionTimeMs: uint32(s.DetectionTime / time.Millisecond),
			LastChangeUnixMs: unixMillis(s.LastChange), Ups: s.Counters.Ups, Downs: s.Counters.Downs,
			PacketsSent: s.Counters.PacketsSent, PacketsReceived: s.Counters.PacketsReceived,
			ControlPlaneIndependent: s.Config.ControlPlaneIndependent,
		})
	}
	return out
}

// collector exports the manager's state as Prometheus metrics, read at
// scrape time.
type collector struct{ m *Manager }

var (
	descAnnounced = prometheus.NewDesc("novaedge_vip_announced",
		"1 when this node announces the VIP (L2ARP active and claimed, BGP routes advertised, or OSPF host route originated with a Full adjacency), else 0.", []string{"vip", "mode"}, nil)
	descL2Packets = prometheus.NewDesc("novaedge_vip_l2_packets_total",
		"L2 announcement packets: kind garp (gratuitous ARP sent), unsolicited_na, arp_reply, solicited_na; suppressed (answers not sent, lease expired); conflict (another host announced a VIP).", []string{"kind"}, nil)
	descBGPSession = prometheus.NewDesc("novaedge_vip_bgp_session_state",
		"1 for the current BGP FSM state of each configured peer (Idle, Connect, Active, OpenSent, OpenConfirm, Established).", []string{"peer", "state"}, nil)
	descBGPUp = prometheus.NewDesc("novaedge_vip_bgp_session_established",
		"1 when the BGP session with the peer is Established, else 0.", []string{"peer"}, nil)
	descBFDSession = prometheus.NewDesc("novaedge_vip_bfd_session_state",
		"1 for the current state of each BFD session (AdminDown, Down, Init, Up).", []string{"peer", "local", "state"}, nil)
	descBFDUp = prometheus.NewDesc("novaedge_vip_bfd_session_up",
		"1 when the BFD session with the peer is Up, else 0.", []string{"peer", "local"}, nil)
	descOSPFFull = prometheus.NewDesc("novaedge_vip_ospf_neighbor_full",
		"1 when the OSPF adjacency with the neighbour (router ID, on this node's interface) is Full, else 0.", []string{"router_id", "interface"}, nil)
)

// Describe sends the descriptors.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAnnounced, descL2Packets, descBGPSession, descBGPUp, descBFDSession, descBFDUp, descOSPFFull} {
		ch <- d
	}
}

// Collect reads the state.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := c.m.State(ctx)
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, v := range st.VIPs {
		ch <- prometheus.MustNewConstMetric(descAnnounced, prometheus.GaugeValue, b2f(v.Announced), v.VIP, shortName(v.Mode.String(), "VIP_MODE_"))
	}
	for _, k := range []struct {
		kind string
		n    uint64
	}{
		{"garp", st.L2.GARPs}, {"unsolicited_na", st.L2.UnsolicitedNAs}, {"arp_reply", st.L2.ARPReplies},
		{"solicited_na", st.L2.SolicitedNAs}, {"suppressed", st.L2.Suppressed}, {"conflict", st.L2.Conflicts},
	} {
		ch <- prometheus.MustNewConstMetric(descL2Packets, prometheus.CounterValue, float64(k.n), k.kind)
	}
	for _, p := range st.BGP.Peers {
		ch <- prometheus.MustNewConstMetric(descBGPSession, prometheus.GaugeValue, 1, p.Peer.Address.String(), string(p.State))
		ch <- prometheus.MustNewConstMetric(descBGPUp, prometheus.GaugeValue, b2f(p.State == bgp.StateEstablished), p.Peer.Address.String())
	}
	for _, s := range st.BFD.Sessions {
		ch <- prometheus.MustNewConstMetric(descBFDSession, prometheus.GaugeValue, 1, s.Peer.String(), s.Local.String(), s.State.String())
		ch <- prometheus.MustNewConstMetric(descBFDUp, prometheus.GaugeValue, b2f(s.State == bfd.StateUp), s.Peer.String(), s.Local.String())
	}
	for _, n := range st.OSPF.Neighbors {
		ch <- prometheus.MustNewConstMetric(descOSPFFull, prometheus.GaugeValue, b2f(n.Full()), n.RouterID.String(), n.Interface)
	}
}
