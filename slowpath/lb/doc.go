// Package lb holds the slow path's load balancers, one per ProxyBackend
// lbPolicy: smooth weighted round robin, weighted random, power of two
// choices (least request), peak EWMA, least connections, a consistent-hash
// ring (Envoy's ring_hash) and Maglev.
//
// A Balancer is built once per configuration by New from a list of weighted
// targets and is immutable afterwards except for internal counters; Pick is
// safe for concurrent use and does not allocate. The live state it reads
// (requests in flight, latency, health, ejection) belongs to the
// endpoint.Endpoint values, which outlive configurations.
//
// Every policy shares three rules:
//
//   - Availability: an endpoint is picked only when ep.Available(now), unless
//     the backend is in panic mode.
//   - Panic mode (Envoy's): when the share of available endpoints (by count)
//     falls below Options.PanicThresholdPercent, availability is ignored and
//     traffic spreads over all endpoints rather than overload the few left.
//   - Retries: endpoints that Request.Tried reports are avoided while another
//     eligible endpoint exists.
//
// HashKey computes the affinity key that RingHash and Maglev hash on from an
// HTTP request and a pb.HashPolicy.
package lb
