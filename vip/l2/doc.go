// Package l2 announces NovaEdge VIPs on an Ethernet segment (mode L2ARP):
// gratuitous ARP and unsolicited neighbour advertisements at takeover, and
// answers to ARP requests and neighbour solicitations for as long as this
// node is the active one. Choosing the active node (heartbeats, standbys,
// failover) is the announcement manager's job; this package gives it the
// building blocks: [Announcer.Announce], [Announcer.Release],
// [Announcer.Active], [Announcer.Renew] and [Announcer.Counters].
//
// # No split brain
//
// A node must stop claiming a VIP by itself when its agent dies or hangs,
// without help from the node that takes over. The kernel therefore never
// answers for a VIP:
//
//   - The VIP is bound on lo ([Options.BindInterface]) as a host address
//     (/32, /128), not on the interface it is announced on. The kernel
//     accepts traffic for it on any interface (Linux is a weak host).
//   - IPv4: arp_ignore=1 on the announce interface makes the kernel answer
//     ARP only for addresses bound on that interface, so never for the VIP;
//     arp_announce=2 keeps the VIP out of the sender address of the kernel's
//     own ARP requests, which would teach neighbours the VIP's MAC behind
//     our back. Both are raised, never lowered, and left in place on
//     release: they are harmless for the host's own addresses and keep
//     other addresses on lo (mode Local VIPs) off the segment too.
//   - IPv6: the kernel answers solicitations only for addresses on the
//     receiving interface, so a VIP on lo is already off its path. The VIP
//     is added without duplicate address detection (nodad) and deprecated
//     (preferred lifetime 0), so that source address selection never picks
//     it for the kernel's own solicitations, and without a prefix route
//     (noprefixroute), so that the main table keeps leading to the VIP's
//     segment rather than to lo.
//
// The agent answers instead, from user space, through AF_PACKET sockets on
// the announce interface (one for ARP, one for IPv6 with a classic BPF
// filter that passes only neighbour solicitations and advertisements), and
// it answers only while its lease is fresh: [Announcer.Renew] sets the
// lease's end, and every answer and every gratuitous announcement first
// checks [Options.Clock] against it. A killed agent stops answering because
// its sockets die with it; a hung agent, or one whose manager no longer
// renews, stops when the lease runs out.
//
// We chose user-space answering (with the lease gate) over answering from
// XDP with the lease in a BPF map: it needs no program on the NIC, works on
// any driver, and the fencing argument is the same (an agent that stops
// renewing stops answering). The remaining gaps, which the manager must
// account for:
//
//   - The lease must end before a standby may take over: the lease length
//     has to be shorter than the standby's failure detection time
//     (e.g. BFD detection), or both nodes answer for a moment.
//   - Neighbours that cached this node's MAC keep sending to it until the
//     new active node's gratuitous announcements reach them, and the fenced
//     node still accepts that traffic, because the VIP stays bound on lo
//     when an agent dies. Fencing stops new claims; it does not pull old
//     ones back.
//   - Renew is a promise that this node is still the active one. A manager
//     that resumes after a hang must learn its role before it renews, or it
//     answers again next to the node that took over.
//   - Only the announce interface gets arp_ignore. Another interface of the
//     node on the same segment would still answer ARP for the VIP.
//   - The packet sockets see untagged frames of the interface they are
//     bound to; announce on the VLAN device, not on its parent.
//
// # What goes on the wire
//
// At takeover, and then [Options.Repeat] − 1 more times [Options.Interval]
// apart, Announce sends for an IPv4 VIP a gratuitous ARP (the request form
// by default, as MetalLB does: sender and target address both the VIP,
// target MAC zero; the reply form or both by [Options.GARP]) and for an IPv6
// VIP an unsolicited neighbour advertisement to all-nodes (Override set,
// Solicited clear, Target Link-Layer Address option with the interface's
// MAC). Release stops the schedule.
//
// Answers: ARP requests for an active VIP, broadcast or unicast (Linux
// re-checks its entries with unicast requests), get a reply with the
// interface's MAC; duplicate address probes (sender 0.0.0.0) get one too,
// as the kernel would give for its own addresses; announcements by others
// (sender address equal to the target) are not answered but counted as
// conflicts. Neighbour solicitations for an active VIP, multicast to its
// solicited-node group or unicast (neighbour unreachability probes), get a
// solicited advertisement with Override set, sent straight to the
// soliciting MAC; a duplicate address detection probe (source ::) gets an
// advertisement to all-nodes. The socket joins each VIP's solicited-node
// group on the interface, so that the kernel reports the membership (MLD)
// and switches that snoop MLD forward the solicitations.
//
// # Namespaces and threads
//
// [New], [Announcer.Announce], [Announcer.Release] and [Announcer.Close]
// act on the network namespace of the calling thread (sockets, addresses
// and sysctls), as package bfd does; call them all from the same namespace.
//
// The package works on Linux only.
package l2
