// Package bench runs the XDP packet-rate benchmark: every case (a way for
// the node namespace to forward VIP traffic to the backend) under every
// traffic profile, in one topology and one run, so that the ratios between
// cases hold even where absolute numbers drift.
//
// A case is registered in [Cases] with a [Setup] that prepares the node and
// returns a cleanup. The NovaEdge fast path is a case whose Setup is still
// nil: it is reported as not yet wired, never with a number.
package bench
