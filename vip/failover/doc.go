// Package failover decides, on each node, whether it answers for an L2 VIP
// now: the node the controller (or standalone configuration) made active,
// or a standby that lost the active, from heartbeats (BFD sessions, vip/bfd)
// between the nodes of the VIP. It is how an L2 VIP moves in about a BFD
// detection time, long before the controller notices an agent's Lease
// expired; the controller's next assignment then agrees with it (it
// promotes the first standby too) or overrides it.
//
// Every node of a VIP runs a session to every other node of it (the list
// is short: the active and its standbys). What a node knows of a peer:
//
//   - Up: heartbeats flow both ways;
//   - Lost: our detection time expired (diag 1): we stopped hearing it;
//   - SaysLost: it told us it stopped hearing us (diag 3, "neighbour
//     signalled session down");
//   - Unknown: no session state yet, or no address to reach it.
//
// The rules, for a node at position k of [active, standby 1, standby 2...]:
//
//   - the active answers unless the first standby says it lost the active
//     (that standby takes over, so the active yields: one MAC on the wire);
//   - standby k answers when it lost the active and every standby before it;
//   - Unknown counts as alive: without heartbeats (no addresses, standalone)
//     the assignment alone decides.
//
// One-way loss is the case that breaks naive designs. When the active's
// packets stop reaching the first standby, the standby's timer expires
// (Lost) and it takes over, and tells the active (SaysLost), which yields.
// When the standby's packets stop reaching the active, the active's timer
// expires and it tells the standby (SaysLost, not Lost), which therefore
// does not take over: the active keeps serving. Either way one node answers.
//
// After a heal, the active reclaims only once its session with the first
// standby has been Up for a hold-down (a detection time), so the standby
// has stopped answering first.
//
// Heartbeats cannot tell a dead active from a cut path between two live
// nodes. A standby that took over therefore keeps the VIP for a grace
// period longer than the agents' Lease duration: if the active had died,
// the controller has promoted the standby by then (the new assignment names
// it active); if the assignment still names the old active, the controller
// still hears that agent, and the standby yields; an active that yielded
// because its first standby said it lost it takes the VIP back once as
// long (a lasting one-way loss must not leave nobody answering; the
// standby's grace starts first, when it stopped hearing the active, so it
// yields before the active reclaims). A cut in both directions
// between the two nodes thus has both answer for at most the grace period;
// avoiding that needs a quorum the two nodes do not have.
package failover
