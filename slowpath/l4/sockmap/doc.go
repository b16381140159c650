// Package sockmap splices established TCP socket pairs inside the kernel:
// once the slow path has decided where a connection goes (plain TCP, TLS
// passthrough after the SNI, a WebSocket after its upgrade), a Splicer puts
// both sockets into a BPF SOCKHASH whose sk_skb verdict program
// (bpf/sockmap.bpf.c) redirects every byte arriving on one socket to the
// other socket's egress. User space no longer reads or writes the stream; it
// only waits for its ends.
//
// How a splice runs:
//
//  1. The bytes the caller already read from each side (pending) are written
//     to the other side first, so they go out before any spliced byte.
//  2. Both sockets enter sockmap_peers, each under the other's cookie (no
//     program there), then sockmap_spliced, where the verdict program starts
//     taking their bytes. Bytes that arrived before and were not read yet are
//     pushed through the program at once (sockopt.Socket.Nudge), so nothing
//     waits for a next segment.
//  3. An end of stream is seen without reading: a goroutine per socket waits
//     in Go's network poller for POLLRDHUP. Before passing the FIN on with
//     CloseWrite, it waits until the socket's receive queue is empty and the
//     peer's send path has taken every byte the program redirected (the
//     program counts them per socket in sockmap_stats; the kernel sends
//     redirected bytes from a work queue, so they can trail the FIN).
//  4. When both directions have ended, or a socket is reset, ctx ends or the
//     Splicer is closed, the map entries are removed and both connections
//     closed.
//
// Splicing costs two map entries per socket and a kernel work-queue hop per
// redirected skb; whether it beats Pipe (io.Copy with splice(2)) is measured
// by perf/splice rather than assumed.
package sockmap
