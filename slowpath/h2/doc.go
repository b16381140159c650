// Package h2 is the slow path's HTTP/2 server: h2 over TLS, h2c with prior
// knowledge and h2c Upgrade, conforming to RFC 9113 on its own (h2spec
// --strict passes without a filter) at a small cost per stream.
//
// golang.org/x/net/http2's server spends about a third of the slow path's
// CPU per request on its own machinery: a serve loop that every frame and
// every handler event passes through on channels, a goroutine per stream
// growing its stack anew, a write scheduler that flushes one frame at a
// time. This server keeps x/net's Framer for frame headers and the frames
// other than HEADERS, and its HPACK encoder and decoder, and replaces the
// rest:
//
//   - Request header blocks (HEADERS and CONTINUATION) are read from the
//     connection's buffer and decoded by one HPACK decoder per connection
//     into a reused field slice, with RFC 9113's field checks (headers.go):
//     x/net's MetaHeadersFrame cost about 7 allocations per request, an
//     indexed block now none. A block is bounded on the wire, empty
//     CONTINUATIONs included.
//   - One goroutine per connection reads frames and runs the stream state
//     machine under the connection's mutex. It never blocks on a handler:
//     handlers start on workers of slowpath/internal/workpool (which keep
//     the stacks they grew) through its non-blocking Go.
//   - Frames are encoded by whoever produces them, under the same mutex,
//     into one buffer per connection (writeBuf); a flusher goroutine,
//     started when the buffer turns non-empty, yields once and writes all
//     that gathered with one system call. A small response (HEADERS and
//     one DATA frame with END_STREAM, or HEADERS alone) costs its handler
//     no blocking and no goroutine switch; concurrent streams' responses
//     leave together.
//   - Request bodies are buffered per stream, at most one stream window
//     (1 MiB advertised; 16 MiB per connection), and the window is given
//     back with WINDOW_UPDATE as the handler reads. Response DATA waits for
//     the client's windows, and for the pending bytes to drain below
//     maxPending, on a condition variable.
//   - Stream state is pooled (sync.Pool) once both the protocol and the
//     handler are done with it; common header names convert between wire
//     and canonical form without allocating.
//
// A proxy can skip header maps both ways: Server.Raw is offered each
// request's fields as decoded before a map is built (RawHandler; a
// declined request gets the map it would have had), and
// SetResponseFields encodes an upstream HTTP/1.x head's fields directly.
//
// Abuse bounds: streams whose handler still runs count against
// MaxConcurrentStreams, so a client resetting streams cannot start more
// handlers than that; refused and client-reset streams are metered
// (burst 1000, then 200/s) and beyond that the connection ends with
// ENHANCE_YOUR_CALM; a header block is bounded by MaxHeaderBytes (which
// bounds CONTINUATION floods); replies the client leaves unread (PING,
// SETTINGS ACKs, RST_STREAMs) end the connection past floodLimit. Frames
// a client sent on a stream before it saw our RST_STREAM (the rest of a
// body a handler did not read, trailers) are ignored, not treated as
// frames on a closed stream.
//
// Semantics follow x/net's server where the proxy relies on them (request
// fields, trailers, 1xx, 100-continue, Content-Type sniffing, Date,
// Content-Length checks, ErrAbortHandler). Differences: response headers
// are read from the Header map when they are sent (at the first flush or
// when the handler returns), not copied at WriteHeader. The per-stream
// read and write deadlines of http.ResponseController are supported: a
// read deadline fails a waiting body read with os.ErrDeadlineExceeded, a
// write deadline resets the stream.
package h2
