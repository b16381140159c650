// Package schedule decides which nodes serve each VIP: the active node and
// the ordered standbys of an L2ARP VIP, the announcing nodes of a BGP, OSPF
// or Local VIP.
//
// Schedule is a pure, deterministic function of its requests: every
// controller replica computes the same assignments from the same inputs, so
// a leader change moves nothing. It knows nothing of Kubernetes: the caller
// decides which nodes are eligible (nodeSelector, node Ready, agent lease
// fresh, agent healthy, a local endpoint for externalTrafficPolicy Local)
// and passes the assignment currently in force (from status).
//
// Placement is sticky. An L2ARP VIP keeps its active node while that node
// stays eligible; when it leaves, the first still-eligible standby takes
// over, which is the node the agents' own heartbeat failover has already
// promoted, so the controller confirms what the data plane did instead of
// moving the address a second time. A node that comes back joins at the end
// of the standby list and takes nothing back. Newcomers to a standby list,
// and the active node of a VIP that has none, are ordered by rendezvous
// (highest-random-weight) hashing of the VIP and node names, so different
// VIPs prefer different nodes and a failed node's VIPs spread over the
// survivors; a new active node is the one holding the fewest active VIPs,
// so new VIPs balance across nodes.
package schedule
