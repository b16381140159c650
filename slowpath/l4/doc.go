// Package l4 holds the slow path's layer-4 building blocks for what XDP cannot
// serve: TLS passthrough routed by SNI and plain TCP and UDP services.
//
//   - PeekClientHello reads a TLS ClientHello without terminating TLS and
//     reports the server name, ALPN protocols and offered versions, returning
//     a ReplayConn that hands the peeked bytes on unchanged.
//   - Pipe copies both ways between a client and an upstream connection,
//     honouring half-close, an idle timeout and context cancellation. Between
//     two *net.TCPConn it keeps io.Copy on Go's splice(2) fast path.
//   - UDPProxy relays datagrams from one listening socket, with one connected
//     upstream socket per client address, idle expiry and a session bound.
//
// The package does not know about listeners, routes or balancers: the caller
// accepts connections, chooses an upstream (by SNI, port or a balancer) and
// dials it.
package l4
