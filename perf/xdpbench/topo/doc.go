// Package topo builds the XDP benchmark's network: two named network
// namespaces, "gen" (traffic generator, sink, clients and backend) and
// "node" (the forwarder under test), joined by one veth pair.
//
// The load balancing is one-armed: clients and the backend both live in the
// gen namespace and the VIP is routed through the node, so every forwarding
// variant sends a frame back out of the veth it came in on, exactly like a
// plain XDP_TX program does, and that program is a fair ceiling. Neighbour
// entries are static, so no ARP is ever involved; IPv6 is disabled on the
// veths so that no neighbour discovery or MLD frames mix with the traffic.
//
// Everything is created under names that start with the caller's prefix and
// removed again by [Topology.Close] (deleting a namespace also deletes its
// veth end, addresses, nftables tables and XDP attachments).
package topo
