// Package snapshot builds a node's ConfigSnapshot from a set of resources.
//
// Build is a pure, deterministic function: no Kubernetes client, no clock, no
// randomness, no map iteration order. The controller feeds it from informers
// and the standalone agent from YAML files, so both produce the same snapshot
// from the same resources. The cluster-wide part of the result is
// byte-identical on every node; only the node part differs. The one
// exception is a Service of type LoadBalancer with externalTrafficPolicy
// Local: each node balances its traffic over the endpoints on that node, so
// the backend and plan entries of its ports list different endpoints on
// each node.
//
// Build never panics on bad input and never gives up on the whole set: a
// resource with an error is left out (with the resources that depend on it)
// and reported as a diagnostic naming the resource, the field and the
// problem; everything else is served.
package snapshot
