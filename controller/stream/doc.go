// Package stream is the controller's side of the controller → agent
// configuration stream (novaedge.v1.SnapshotService): it keeps the latest
// snapshot published for each node, stamps it with a version, pushes it to
// the node's agent, and records what every agent connected, applied (ACK) or
// rejected (NACK).
//
// Versions never go backwards for an agent, across controller replicas and
// leader changes: a version is term<<32 | counter, and the counter is a
// Lamport clock that moves above every version an agent reports having
// applied. Publish never waits for an agent: each stream keeps only the
// newest snapshot not yet sent, so a slow agent skips to the latest one and
// never delays the others.
package stream
