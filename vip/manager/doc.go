// Package manager is the node's VIP announcement manager: an agent
// applier ("vip") that turns the node part of each ConfigSnapshot into
// announcements with the building blocks of package vip — L2 ARP/NDP
// ([l2.Announcer]), BGP ([bgp.Speaker]) and BFD ([bfd.Speaker]) — and
// reports their state for the admin API, novaedgectl and metrics.
//
// Compile checks the node part (addresses, interface names, BGP settings
// that must agree between VIPs, BFD timers) and rejects the snapshot with
// an error naming the VIP and field; Apply reconciles:
//
//   - L2ARP: a VIP whose role is ACTIVE is announced on its interfaces
//     (default: the interface of the main-table route towards the VIP, that
//     is the route of its subnet, else the default route's); STANDBY or
//     absent is released. The announcer's lease is renewed every TTL/3
//     ([Options.L2LeaseTTL], 3 s by default) by a goroutine that runs while
//     the manager lives. A hung agent therefore stops answering ARP/NDP for
//     its VIPs at most TTL after its last renewal, and a killed one at once
//     (its sockets die). Heartbeats between the active and standby nodes
//     and failover are not done yet: a STANDBY never takes over.
//   - BGP: one speaker per node, started when the first BGP assignment
//     arrives. It announces the BGP VIPs that [Serving] accepts: a VIP is
//     withdrawn when it has plan entries and none of them can reach a
//     HEALTHY endpoint (see [Serving] for the exact rule).
//   - BFD: one session per BGP peer of a VIP with BFD enabled, with the
//     VIP's timers; a session that fails (Up to Down, not AdminDown) shuts
//     the peer down ("BFD down") and enables it again when it is Up. The
//     Go speaker does not run where another one (FRR's bfdd) holds UDP
//     port 3784: that is reported in the status, and BGP runs without BFD.
//   - OSPF: not supported yet; OSPF assignments are reported as such.
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
// [Manager.Withdraw] removes the node from the routing instead (Cease,
// addresses unbound, marker removed).
package manager
