// Package h2conform makes the slow path's HTTP/2 server conform to RFC 9113
// where Go's server does not (h2spec --strict is the yardstick).
//
// HTTP/2 is served by golang.org/x/net/http2's server, installed with
// http2.ConfigureServer, behind a read-side filter on each connection. The
// filter never writes to the peer and never answers errors itself: it
// parses the frames the client sends and, where the server would get an
// input wrong, rewrites the input so that the server itself gives the
// answer the RFC requires:
//
//   - A SETTINGS frame repeating a parameter (legal: values apply in
//     order, RFC 9113 §6.5.3) is rejected by the server as a whole; the
//     filter keeps only the last value of each parameter, or only the
//     first invalid value, whose error the server then reports.
//   - A request carrying a connection-specific header field (connection,
//     keep-alive, proxy-connection, transfer-encoding, upgrade) or a TE
//     other than "trailers" is malformed (§8.2.2) and must be reset with
//     PROTOCOL_ERROR; the server answers 400 instead. The filter mirrors
//     the server's HPACK decoder to see each request's fields and, for such
//     a request, appends two Host fields to the header block: a request
//     with several Host fields is one the server resets with
//     PROTOCOL_ERROR, after opening the stream, so the connection lives on.
//   - On a plaintext listener serving HTTP/1.x and HTTP/2 with prior
//     knowledge, a connection that starts the HTTP/2 preface and breaks
//     off is closed (an invalid preface, §3.4) rather than answered as
//     HTTP/1.1; with Options.StrictPreface, so is one whose first line is
//     no HTTP/1.x request line either, which is all an invalid preface can
//     look like on such a port (net/http would answer 400).
//
// The server advertises SETTINGS_MAX_FRAME_SIZE 16384 (the protocol's
// initial value) rather than Go's 1 MiB, so that an oversized HEADERS frame
// is the connection error §4.2 requires.
//
// On the common path (DATA, WINDOW_UPDATE, PING and the like) the filter
// reads the 9-byte frame header and hands the payload through without
// copying it again or allocating; HEADERS frames cost a second HPACK
// decode. Anything the filter cannot follow (a frame the server will
// reject as a connection error, an HPACK error) makes it step aside for
// the rest of the connection, so it never turns a valid exchange into an
// invalid one.
package h2conform
