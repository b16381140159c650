// Package bfdd keeps a node's BFD sessions in a process of their own, so
// that an agent restart is not a node death to the routers.
//
// A BFD session that dies with the agent takes the BGP peer with it: the
// router drops every path of the node at once, graceful restart or not,
// and an upgrade of the agent would blackhole its VIPs for the time the
// routes take to come back. novaedge-bfdd (cmd/novaedge-bfdd) runs a
// [bfd.Speaker] behind a [Server] on a Unix socket; the agent's VIP manager
// drives it through a [Client], which has the methods of the speaker it
// would otherwise embed.
//
// The C bit (control-plane independence, RFC 5880 §4.1) of each session
// says how long it outlives its agent, so that it is always true:
//
//   - Sessions with it set (the BGP peers') stay as they are when the
//     agent goes away; the next agent adopts them without a single packet
//     changing, and the router keeps the node's paths through BGP graceful
//     restart. A node that dies takes the daemon with it, and the router
//     sees that within the detection time. If no agent comes back within
//     the orphan timeout, the daemon takes them AdminDown.
//   - Sessions without it depend on their agent and are taken AdminDown as
//     soon as it detaches. (The agents' L2 heartbeats do not come here:
//     they run on a port of their own in a speaker inside the agent.)
//
// One agent is attached at a time; a newer one (an upgrade starting while
// the old agent drains) replaces the older.
package bfdd
