// Package compress compresses the slow path's HTTP responses (a
// ProxyGateway's compression field) with gzip, brotli ("br") or zstd, chosen
// by the client's Accept-Encoding and the gateway's order of preference.
//
// A Compressor is built once per configuration by New and is immutable; its
// Wrap method wraps one request's http.ResponseWriter. Encoders are kept in
// package-level pools keyed by algorithm and level, so they are reused across
// requests and survive configuration reloads.
//
// A response is compressed only when all of these hold, as nginx, Envoy and
// Traefik users expect:
//
//   - the request is not HEAD and has no Range header, and its
//     Accept-Encoding accepts one of the configured codings (q-values,
//     "*" and "identity" honoured; no Accept-Encoding means identity);
//   - the status is not 1xx, 204, 206 or 304;
//   - the response has no Content-Encoding and no Cache-Control: no-transform;
//   - its Content-Type is in the configured list and is not gRPC
//     (application/grpc*); a response without Content-Type is not compressed
//     (nothing is sniffed);
//   - its body is at least MinSize bytes.
//
// The size rule never holds a stream back: with a Content-Length the decision
// is made at WriteHeader; without one, up to MinSize bytes are buffered, and a
// Flush before that forces the decision in favour of compression (a flushed
// response of unknown length is a stream, which is worth compressing, and
// httputil.ReverseProxy flushes every response of unknown length after each
// write). Server-sent events (text/event-stream) and responses that declare
// trailers are decided at once, and event streams are flushed after every
// write so each event reaches the client when it is written.
//
// A compressed response loses its Content-Length and Accept-Ranges, gets
// Content-Encoding, and its strong ETag is weakened (W/) as nginx does. Every
// response that would have been compressed for some Accept-Encoding gets
// "Vary: Accept-Encoding", compressed or not, so shared caches keep the
// variants apart.
package compress
