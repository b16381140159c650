// Package slowpath is NovaEdge's L7 proxy: it serves every VIP:port that the
// snapshot plan marks SLOW (HTTP routing, TLS termination, SNI routing,
// policies). A snapshot is compiled into an immutable Config (listeners,
// router, backends) and swapped in with one atomic store; listener sockets,
// endpoint state (health, load) and upstream connection pools outlive
// configurations so reloads drop nothing.
//
// HTTP/1.x on plaintext connections, and on TLS connections that negotiate
// it, is served by h1, a server of our own that reuses per-connection
// state; HTTP/2 (h2c with prior knowledge or Upgrade, h2 by ALPN) by h2,
// another of our own (one reader per connection, handlers on pooled
// workers, frames written in bursts); HTTP/3 by quic-go. Requests that do
// not upgrade the connection are forwarded without httputil.ReverseProxy
// (direct.go); upgrades (WebSocket) still use it.
//
// Sub-packages: endpoint (per-endpoint live state), lb (load balancers),
// health (active checks and outlier ejection), router (compiled HTTP routes),
// upstream (the HTTP/1.1 client for plain-HTTP backends; TLS, h2, h2c and
// gRPC backends use net/http's Transport), h1 (the HTTP/1.x server), h2
// (the HTTP/2 server), certs, sockets, l4, compress, internal/httphead
// (HTTP/1.x head parsing shared by h1 and upstream), internal/wbatch
// (writes of many connections in one burst), internal/workpool,
// internal/ctxhook.
package slowpath
