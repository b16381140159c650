// Package controller is NovaEdge's control plane in a cluster. It watches
// the NovaEdge CRDs, Services, EndpointSlices, Secrets, Nodes and the agents'
// liveness Leases through controller-runtime's cache, and:
//
//   - as the leader (one replica, through the "novaedge-controller" Lease)
//     decides: allocates VIP addresses from ProxyIPPools, chooses the nodes
//     serving each VIP, and writes those decisions, conditions and Events to
//     the API server, and the Maglev lineage of each large cluster-wide
//     fast-path entry to a ConfigMap (lineage.go);
//   - on every replica builds each node's ConfigSnapshot with snapshot.Build
//     from the resources and the decisions the leader persisted (never from
//     decisions of its own), and streams it to the agents connected to it
//     through controller/stream.
//
// Persisting decisions before anyone builds from them is what lets agents
// connect to any replica, and lets a new leader pick up where the old one
// stopped without moving an address or a VIP.
package controller
