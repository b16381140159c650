// Package local binds the addresses of NovaEdge VIPs in mode Local on this
// host, through netlink, and announces nothing: no gratuitous ARP, no BGP.
// Traffic reaches such a VIP only from the host itself or over routes that
// someone else set up, which is what mode Local promises.
//
// The standalone agent keeps one [Manager] and calls [Manager.Apply] with the
// full wanted set after every configuration change. The manager adds what is
// missing and removes only what it added itself: an address that was already
// on the host (configured by the admin, say) is adopted and never removed. A
// state file records the addresses the manager added, so that an agent that
// restarts still knows which addresses are its own; addresses are left bound
// when the agent stops, so a restarted agent keeps serving without a gap.
// [Manager.Release] is the explicit uninstall.
//
// [ListenConfig], [Listen] and [ListenPacket] open sockets with IP_FREEBIND /
// IPV6_FREEBIND, so that listeners can bind a VIP before the address is bound
// on the host, and the order in which the agent starts listeners and binds
// addresses does not matter.
//
// The package works on Linux only.
package local
