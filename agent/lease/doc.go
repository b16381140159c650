// Package lease is the agent's liveness signal: a coordination.k8s.io/v1
// Lease named novaedge-agent-<node> that the agent keeps renewing and the
// controller reads. A node whose Lease is no longer Fresh has lost its agent,
// and the controller moves its VIPs elsewhere.
//
// The Lease is never deleted or expired on purpose: when the agent stops, it
// simply stops renewing, so a restart (an upgrade, a crash) within the lease
// duration does not look like a node death, and the next process takes the
// Lease over under its own holder identity.
package lease
