// Package upstream is the slow path's HTTP/1.1 client for plain-text
// upstreams: an http.RoundTripper that keeps a pool of keep-alive
// connections per endpoint address and does each exchange on the calling
// goroutine.
//
// net/http's Transport moves every request through three goroutines (the
// caller, a write loop and a read loop per connection) with channel
// handoffs between them; on a proxy that forwards small requests this is
// a large share of its CPU (perf/results/http-profile-2026-11-23.md). Here
// the caller writes the request line, headers and body into the
// connection's bufio.Writer and flushes once, then reads the response head
// from the connection's bufio.Reader; the response body reads straight from
// that reader and hands the connection back to the pool when it reaches
// the end of the body. Nothing runs in the background except one timer per
// endpoint that closes idle connections.
//
// What it speaks: HTTP/1.1 requests to HTTP/1.1 and HTTP/1.0 servers;
// request bodies with Content-Length or chunked (and request trailers);
// response bodies framed by Content-Length, chunked (with trailers) or the
// end of the connection, and none for HEAD, 1xx, 204 and 304;
// Connection: close either way; Expect: 100-continue; informational 1xx
// responses handed to httptrace.ClientTrace.Got1xxResponse (which
// httputil.ReverseProxy uses to forward them); and 101 Switching Protocols,
// whose response body is the connection itself (an io.ReadWriteCloser, as
// ReverseProxy needs for WebSocket). Cancelling the request's context
// interrupts any wait (for a connection, the dial, writing, reading the
// head or the body). TLS, HTTP/2 and proxies are not its business: the
// slow path keeps net/http's Transport for those.
//
// A request that fails on a reused connection before any byte of the
// answer arrived (the server closed an idle connection as the request went
// out) is sent again on another connection when that is safe, as
// net/http's Transport does: GET, HEAD, OPTIONS and TRACE, or a request
// with an Idempotency-Key, whose body is absent or can be obtained again
// with GetBody. Other requests check a reused connection for a close from
// the server before writing to it, which costs one non-blocking read.
package upstream
