// Package e2e tests the XDP fast path end to end, with real traffic between
// network namespaces: a client namespace, one or two node namespaces running
// the fast path (bpf/fastpath.bpf.c loaded with fastpath.Load, fed by a
// fastpath.Manager, attached in native mode by fastpath/attach) and three
// backend namespaces with real TCP and UDP servers that answer with their
// name, so every reply says which backend served it.
//
// The tests cover NAT (IPv4 and IPv6, TCP and UDP, ICMP echo on the VIP),
// DSR with IPv4-in-IPv4, IPv6-in-IPv6 and GUE (the backends run
// fastpath/decap), flow affinity for the lifetime of a connection, the
// spread over backends and its agreement with the Maglev table and
// fastpath/flowhash, an Apply that removes a backend while connections run,
// traffic handed to the kernel (non-VIP addresses and VIP entries marked
// ForwardPass), two clients sharing a source port, ten thousand concurrent
// UDP flows, SNAT port exhaustion being counted, a TCP connection that an
// ECMP router moves from one node to another mid-flow, and the hand-over to
// the kernel of translated packets whose next hop has no neighbour entry yet.
//
// Every test also checks, through the program's counters, that its packets
// really went through XDP (redirected, answered with XDP_TX, tracked) rather
// than through the kernel's own forwarding.
//
// The tests need root (they create namespaces, veth pairs and BPF objects)
// and remove everything they create, by name, when they end. Native XDP
// into a veth delivers only if the peer end runs an XDP program, so the
// peers that receive redirected frames get a trivial XDP_PASS program (the
// client side, NAT backends) or the decapsulation program (DSR backends).
package e2e
