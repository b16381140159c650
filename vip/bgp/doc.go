// Package bgp is the node's embedded BGP speaker for VIP announcement
// (GoBGP v3 in-process): it keeps sessions with the configured peers,
// usually the top-of-rack routers, and announces every VIP the node serves
// as a host route (/32, /128) with itself as next hop, so that the routers
// spread traffic over all announcing nodes with ECMP.
//
// A [Speaker] is driven declaratively: [Speaker.Reconcile] takes the whole
// [Desired] state (local AS, router ID, peers, routes), usually built from
// the node part of a ConfigSnapshot by [FromNode], and applies only the
// difference. The same desired state twice changes nothing on the wire; a
// peer whose settings changed is deleted and added again (its session
// resets); a route whose attributes changed is announced again (an implicit
// withdraw of the old one); routes and peers no longer desired are
// withdrawn and deleted. A change of local AS or router ID restarts the
// whole speaker: both are fixed for the lifetime of a BGP session.
//
// Which VIPs are announced is the caller's decision: a VIP that is removed,
// whose node is unhealthy or that has no healthy backend is simply left out
// of the desired routes, and its routes are withdrawn from every peer.
// [Speaker.SetPeerEnabled] is the hook for BFD: a peer whose BFD session
// goes down is shut down (administratively down, which ends the session
// with a Cease notification and makes the router drop the node's paths at
// once) and enabled again when BFD comes back; the shutdown survives
// reconciles until lifted.
//
// The speaker does not listen on TCP port 179 unless [Options.ListenPort]
// asks for a listener (other software on a node often holds the port): it
// opens the sessions itself, which every router accepts. Families follow
// the peer's address: IPv4 routes go to IPv4 peers and IPv6 routes to IPv6
// peers, each with the session's local address as next hop, which is what a
// router can install. Local preference is sent to iBGP peers only (RFC
// 4271 §5.1.5: it never crosses an AS boundary); MED and communities go to
// every peer.
//
// Graceful restart (RFC 4724) keeps the routers forwarding to this node
// while the agent restarts: with a peer's GracefulRestart set, the router
// keeps the node's routes for [GracefulRestart.RestartTime] after the
// session drops without a Cease notification. An agent that restarts on
// purpose therefore exits without [Speaker.Close] (the kernel closes the
// connections, no notification is sent) and starts the next speaker with
// [GracefulRestart.Restarting] set; [Speaker.Close] is for removing the
// node from the routing: it sends Cease, and the routers withdraw its paths
// at once.
//
// Sockets are opened in the network namespace of the process: GoBGP dials
// from goroutines of its own, which may run on any thread of the process,
// so a speaker cannot be confined to a namespace by entering it on one
// locked thread. Tests run each speaker in a child process started inside
// the namespace.
package bgp
