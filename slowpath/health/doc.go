// Package health decides which of the slow path's backend endpoints may take
// traffic, and records its verdicts in *endpoint.Endpoint, which the
// balancers read.
//
// A Checker probes endpoints actively (HTTP, TCP or grpc.health.v1) on an
// interval and flips endpoint.SetActiveHealthy after consecutive-result
// thresholds. An Outlier watches the outcome of real requests (Report) and
// ejects an endpoint for a growing time after consecutive failures, in the
// manner of Envoy's outlier detection.
//
// Both outlive configurations: Update changes the set of endpoints and
// Reconfigure the settings, while the state of endpoints present before and
// after (counters, verdicts, ejections) carries over, so a reload never makes
// a known-bad endpoint look healthy or the reverse. Time comes from an
// injectable Clock so the state machines can be tested exactly.
package health
