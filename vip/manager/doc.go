// Package manager is the node's VIP announcement manager: an agent
// applier ("vip") that turns the node part of each ConfigSnapshot into
// announcements with the building blocks of package vip — L2 ARP/NDP
// ([l2.Announcer]), BGP ([bgp.Speaker]), BFD ([bfd.Speaker]) and OSPF
// through FRR ([frr.Driver]) — and reports their state for the admin API,
// novaedgectl and metrics.
//
// Compile checks the node part (addresses, interface names, BGP settings
// that must agree between VIPs, BFD timers) and rejects the snapshot with
// an error naming the VIP and field; Apply reconciles:
//
//   - L2ARP: package failover decides whether this node answers for the
//     VIP (Decide with the assignment's active node and ordered standbys);
//     a VIP this node serves is announced on its interfaces (default: the
//     interface of the main-table route towards the VIP, that is the route
//     of its subnet, else the default route's), the others are released.
//     Heartbeats: when the assignment has standbys and node_addresses holds
//     this node's address, one BFD session runs from that address to every
//     other node of the VIP (one per peer address, shared by VIPs), with
//     the VIP's BFD timers when BFD is enabled on it, else 3 × 300 ms.
//     Each session's changes become what this node knows of the peer: Up;
//     Lost (our detection time expired, or the peer went AdminDown because
//     its agent stops); SaysLost (the peer signalled neighbour down); else
//     Unknown. Every L2 VIP is decided again on each change, on each
//     snapshot and when a hold-down (the detection time) or the grace
//     ([Options.L2FailoverGrace]) ends. The active waits up to a few
//     seconds after its session to the first standby was added before it
//     answers, unless the session comes Up first (then it waits the
//     hold-down): a restarted active must not answer next to a standby that
//     took over. The status gives each VIP's decision and its reason.
//     The answer lease is renewed every TTL/3 ([Options.L2LeaseTTL], 3 s by
//     default), only while this node serves some L2 VIP. A hung agent
//     therefore stops answering ARP/NDP for its VIPs at most TTL after its
//     last renewal, and a killed one at once (its sockets die), which is
//     what lets its standby take over after the detection time.
//   - BGP: one speaker per node, started when the first BGP assignment
//     arrives. It announces the BGP VIPs that [Serving] accepts: a VIP is
//     withdrawn when it has plan entries and none of them can reach a
//     HEALTHY endpoint (see [Serving] for the exact rule).
//   - BFD: one speaker per node for BGP peers and L2 heartbeats alike;
//     one session per BGP peer of a VIP with BFD enabled, with the
//     VIP's timers; a session that fails (Up to Down, not AdminDown) shuts
//     the peer down ("BFD down") and enables it again when it is Up. The
//     speaker is FRR's bfdd where it runs (its vty socket is in
//     [Options.FRRSocketDir]; the sessions are written as bfd peers through
//     vtysh and read back every 100 ms, [frr.BFDPeers]), else the node's
//     novaedge-bfdd ([Options.BFDSocket], [bfdd.Client]), else one embedded
//     in the agent. With the first two the BGP peers' sessions outlive the
//     agent (so its restart is not a node death to the routers) and the L2
//     heartbeats end with it.
//   - OSPF: one [frr.Driver] per node, started when the first OSPF
//     assignment arrives, drives FRR's ospfd through vtysh
//     ([Options.FRRSocketDir], [Options.FRRVtysh]); its reconcile loop runs
//     until Close. The addresses of the OSPF VIPs are bound on lo (ospfd
//     advertises only bound addresses, as stub /32 links of the node's
//     router LSA), recorded in [OSPFAddressFile] so that a restarted agent
//     removes only its own; the driver's lines are recorded in
//     [OSPFStateFile]. The VIPs that [Serving] accepts are advertised on
//     the uplinks the VIP names, else [Options.OSPFUplinks], else the
//     default route's interface. The router ID is [Options.RouterID], else
//     the one BGP derived, else the first IPv4 address of the first uplink.
//     A VIP counts as announced when it is in the router LSA and some
//     neighbour is Full; otherwise the status gives the reason, such as an
//     md5 key mismatch seen in the router's Hellos. BFD for OSPF VIPs is
//     FRR's bfdd (the driver writes "ip ospf bfd"): no Go BFD session runs
//     for them.
//   - Local: bound by the agent's LocalVIPs applier, not here.
//
// # Restarts
//
// [Manager.Close], which the agent calls when it exits, leaves the
// announcements to the process's end: the BGP speaker is not closed, so
// the kernel closes its sessions without a Cease notification and the
// routers keep the node's routes as stale (graceful restart); the L2
// responders die with their sockets, and the addresses stay bound. A
// marker file in [Options.StateDir] says that a speaker ran: the next
// manager starts its speaker with [bgp.GracefulRestart.Restarting] set, so
// that the routers keep the stale routes until it has sent its own.
// FRR's OSPF configuration is left as it is, so that ospfd keeps
// advertising the VIPs while the agent is away; the next manager adopts
// the lines it recorded and changes nothing when the snapshot is the same.
// [Manager.Withdraw] removes the node from the routing instead (Cease,
// the driver's OSPF lines removed, addresses unbound, marker removed).
package manager
