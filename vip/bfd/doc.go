// Package bfd is a single-hop asynchronous BFD speaker (RFC 5880, RFC 5881)
// for IPv4 and IPv6: fast detection of a dead neighbour for the BGP peers
// of VIP announcement (BFD down shuts the peer) and for the heartbeats
// between the active and standby nodes of an L2 VIP.
//
// A [Speaker] owns the node's listeners on UDP port 3784 and runs any
// number of sessions, each with its own socket bound to its local address,
// a source port in 49152–65535 and optionally an interface. Packets leave
// with TTL (hop limit) 255 and are accepted only with TTL 255, so that
// nothing more than one hop away can reach a session (RFC 5881 §5). Both
// ends are active, so two Speakers run a session with each other as well
// as with a router. Callers add, update and remove sessions by
// [SessionConfig], read [SessionState] snapshots and [Speaker.Subscribe] to
// state changes. Echo mode and authentication are not supported; Demand
// mode is honoured when the peer asks for it but never requested.
//
// One BFD speaker per network namespace: FRR's bfdd binds the same port, so
// where FRR runs (OSPF mode) its bfdd serves BFD and this package must not
// run; [NewSpeaker] fails when the port is taken. Choosing between them is
// the caller's job.
//
// # Agent restarts versus node deaths
//
// A router that runs BFD towards a node withdraws the node's routes as soon
// as the session goes down, which is what a dead node needs, within the
// detection time (3 × 300 ms by default). An agent that restarts or is
// upgraded must not look the same. The speaker is therefore meant to run in
// a small, long-lived process of its own on each node, separate from the
// agent: it keeps the sessions (and their sockets, discriminators and
// timers) while the agent restarts, the agent reconnects and tells it the
// sessions it wants, and the router sees no change. Sessions in such a
// process set the C bit ([SessionConfig.ControlPlaneIndependent]) because
// it is then true: BFD survives the control plane, and the router may keep
// forwarding through BGP graceful restart of the agent. A speaker embedded
// in the agent must leave the C bit clear: its sessions die with the
// agent. A node that dies takes the speaker with it; the router declares
// the session down after the detection time (diag 1). A speaker that is
// closed on purpose sends AdminDown, which routers do not treat as a
// failure (RFC 5882 §3.2).
//
// Sockets are opened by [NewSpeaker] and [Speaker.AddSession] in the
// network namespace of the calling thread. One goroutine owns all session
// state; API calls, packets and timers are applied in turn. The state
// machine takes the time of every event from [Options.Clock], so tests step
// it exactly.
//
// The package works on Linux only.
package bfd
