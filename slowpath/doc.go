// Package slowpath is NovaEdge's L7 proxy: it serves every VIP:port that the
// snapshot plan marks SLOW (HTTP routing, TLS termination, SNI routing,
// policies). A snapshot is compiled into an immutable Config (listeners,
// router, backends) and swapped in with one atomic store; listener sockets,
// endpoint state (health, load) and upstream connection pools outlive
// configurations so reloads drop nothing.
//
// Sub-packages: endpoint (per-endpoint live state), lb (load balancers),
// health (active checks and outlier ejection), router (compiled HTTP routes),
// upstream (the HTTP/1.1 client for plain-HTTP backends; TLS, h2, h2c and
// gRPC backends use net/http's Transport), certs, sockets, l4, compress.
package slowpath
