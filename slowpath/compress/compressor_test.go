package compress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestNegotiationOverHTTP checks that the coding chosen from
// Accept-Encoding is the one on the wire and that the body decodes.
func TestNegotiationOverHTTP(t *testing.T) {
	body := jsonBody(4096)
	c := mustNew(t, Config{Algorithms: []string{"br", "gzip", "zstd"}})
	srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	tests := []struct {
		accept string // "-" for no header
		want   string
	}{
		{"-", ""},
		{"gzip, deflate, br, zstd", "br"},
		{"gzip", "gzip"},
		{"zstd", "zstd"},
		{"br;q=0, gzip;q=0.5, zstd;q=0.4", "gzip"},
		{"*", "br"},
		{"*;q=0", ""},
		{"gzip;q=0.3, identity;q=0.5", ""},
		{"identity;q=0", ""},
		{"deflate", ""},
	}
	for _, tc := range tests {
		t.Run(tc.accept, func(t *testing.T) {
			var hdr []string
			if tc.accept != "-" {
				hdr = []string{"Accept-Encoding", tc.accept}
			}
			resp, raw := get(t, srv.URL, http.MethodGet, hdr...)
			if got := resp.Header.Get("Content-Encoding"); got != tc.want {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.want)
			}
			if got := decode(t, tc.want, raw); !bytes.Equal(got, body) {
				t.Fatalf("decoded body differs: %d bytes, want %d", len(got), len(body))
			}
			if got := resp.Header.Values("Vary"); len(got) != 1 || got[0] != "Accept-Encoding" {
				t.Errorf("Vary %q, want [Accept-Encoding]", got)
			}
		})
	}
}

// TestNeverCompress covers every rule that keeps a response as it is.
func TestNeverCompress(t *testing.T) {
	body := jsonBody(8192)
	c := mustNew(t, Config{Algorithms: []string{"gzip"}, ContentTypes: []string{"text/", "application/json", "application/"}})
	tests := []struct {
		name     string
		method   string
		reqHdr   []string
		handler  func(w http.ResponseWriter)
		wantVary bool
		wantBody []byte
	}{
		{
			name:   "HEAD",
			method: http.MethodHead,
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			},
			wantVary: true,
		},
		{
			name:   "range request",
			reqHdr: []string{"Range", "bytes=0-99"},
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-99/%d", len(body)))
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write(body[:100])
			},
			wantBody: body[:100],
		},
		{
			name: "range response to a plain request",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write(body)
			},
			wantBody: body,
		},
		{
			name: "already encoded",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Content-Encoding", "br")
				_, _ = w.Write(body)
			},
			wantBody: body,
		},
		{
			name: "no content",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusNoContent)
			},
		},
		{
			name: "not modified",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Etag", `"v1"`)
				w.WriteHeader(http.StatusNotModified)
			},
		},
		{
			name: "no-transform",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Cache-Control", "public, No-Transform, max-age=60")
				_, _ = w.Write(body)
			},
			wantBody: body,
		},
		{
			name: "type not listed",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "image/png")
				_, _ = w.Write(body)
			},
			wantBody: body,
		},
		{
			name: "no content type, not sniffed",
			handler: func(w http.ResponseWriter) {
				_, _ = w.Write([]byte("<html>" + string(body)))
			},
			wantBody: []byte("<html>" + string(body)),
		},
		{
			name: "gRPC even when application/ is listed",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "application/grpc+proto")
				_, _ = w.Write(body)
			},
			wantBody: body,
		},
		{
			name: "below min size with Content-Length",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("Content-Length", "1023")
				_, _ = w.Write(body[:1023])
			},
			wantVary: true,
			wantBody: body[:1023],
		},
		{
			name: "below min size without Content-Length, many writes",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/plain")
				for i := range 1023 {
					_, _ = w.Write(body[i : i+1])
				}
			},
			wantVary: true,
			wantBody: body[:1023],
		},
		{
			name: "empty body",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusOK)
			},
			wantVary: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) { tc.handler(w) })
			method := cmpOr(tc.method, http.MethodGet)
			resp, raw := get(t, srv.URL, method, append([]string{"Accept-Encoding", "gzip"}, tc.reqHdr...)...)
			if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "br" {
				t.Errorf("Content-Encoding %q", ce)
			}
			if !bytes.Equal(raw, tc.wantBody) {
				t.Errorf("body changed: got %d bytes, want %d", len(raw), len(tc.wantBody))
			}
			if got := resp.Header.Get("Vary") == "Accept-Encoding"; got != tc.wantVary {
				t.Errorf("Vary %q, want Accept-Encoding: %t", resp.Header.Values("Vary"), tc.wantVary)
			}
			if method == http.MethodHead && resp.ContentLength != int64(len(body)) {
				t.Errorf("HEAD Content-Length %d, want %d", resp.ContentLength, len(body))
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestMinSize checks the size rule with and without Content-Length, at the
// edges.
func TestMinSize(t *testing.T) {
	const minSize = 1000
	c := mustNew(t, Config{Algorithms: []string{"gzip"}, MinSize: minSize})
	tests := []struct {
		name     string
		size     int
		withLen  bool
		writes   int // the body is written in this many pieces
		wantGzip bool
	}{
		{"known, one below", minSize - 1, true, 1, false},
		{"known, exactly", minSize, true, 1, true},
		{"known, far above", 100_000, true, 7, true},
		{"unknown, one below", minSize - 1, false, 3, false},
		{"unknown, exactly in one write", minSize, false, 1, true},
		{"unknown, exactly in pieces", minSize, false, 10, true},
		{"unknown, far above in pieces", 100_000, false, 1000, true},
		{"unknown, empty", 0, false, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := jsonBody(tc.size)
			srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if tc.withLen {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				piece := (len(body) + tc.writes - 1) / max(tc.writes, 1)
				for rest := body; len(rest) > 0; {
					n := min(piece, len(rest))
					if _, err := w.Write(rest[:n]); err != nil {
						t.Errorf("write: %v", err)
						return
					}
					rest = rest[n:]
				}
			})
			resp, raw := get(t, srv.URL, http.MethodGet, "Accept-Encoding", "gzip")
			ce := resp.Header.Get("Content-Encoding")
			if (ce == "gzip") != tc.wantGzip {
				t.Fatalf("Content-Encoding %q, want gzip: %t", ce, tc.wantGzip)
			}
			if got := decode(t, ce, raw); !bytes.Equal(got, body) {
				t.Fatalf("decoded body differs: %d bytes, want %d", len(got), len(body))
			}
			// net/http may compute a Content-Length for a short compressed
			// body; it must then be the compressed length.
			if tc.wantGzip && resp.ContentLength != -1 && resp.ContentLength != int64(len(raw)) {
				t.Errorf("compressed response has Content-Length %d for %d bytes", resp.ContentLength, len(raw))
			}
			if !tc.wantGzip && resp.ContentLength != int64(len(body)) {
				t.Errorf("identity Content-Length %d, want %d", resp.ContentLength, len(body))
			}
		})
	}
}

// TestRoundTrip decodes every coding for large bodies, one big write, many
// small writes, with and without Content-Length.
func TestRoundTrip(t *testing.T) {
	big := jsonBody(1 << 20)
	for _, coding := range []string{"gzip", "br", "zstd"} {
		c := mustNew(t, Config{Algorithms: []string{coding}})
		for _, tc := range []struct {
			name    string
			body    []byte
			piece   int
			withLen bool
		}{
			{"1 MiB one write", big, len(big), false},
			{"1 MiB one write with length", big, len(big), true},
			{"1 MiB in 100-byte writes", big, 100, false},
			{"1 MiB in 1-byte writes at start then 64 KiB", big, 0, false},
			{"2 KiB", big[:2048], 2048, false},
		} {
			t.Run(coding+"/"+tc.name, func(t *testing.T) {
				srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json; charset=utf-8")
					if tc.withLen {
						w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
					}
					rest := tc.body
					if tc.piece == 0 {
						// Byte by byte across the MinSize boundary, then
						// in large pieces.
						for range 2000 {
							_, _ = w.Write(rest[:1])
							rest = rest[1:]
						}
						tc.piece = 64 << 10
					}
					for len(rest) > 0 {
						n := min(tc.piece, len(rest))
						if _, err := w.Write(rest[:n]); err != nil {
							t.Errorf("write: %v", err)
							return
						}
						rest = rest[n:]
					}
				})
				resp, raw := get(t, srv.URL, http.MethodGet, "Accept-Encoding", coding)
				if got := resp.Header.Get("Content-Encoding"); got != coding {
					t.Fatalf("Content-Encoding %q, want %q", got, coding)
				}
				if len(raw) >= len(tc.body) {
					t.Errorf("compressed %d bytes to %d", len(tc.body), len(raw))
				}
				if got := decode(t, coding, raw); !bytes.Equal(got, tc.body) {
					t.Fatalf("decoded body differs: %d bytes, want %d", len(got), len(tc.body))
				}
				if resp.ContentLength != -1 && resp.ContentLength != int64(len(raw)) {
					t.Errorf("Content-Length %d for %d compressed bytes", resp.ContentLength, len(raw))
				}
			})
		}
	}
}

// TestConcurrent runs many requests at once over every coding so the race
// detector sees encoders cross between pools and requests.
func TestConcurrent(t *testing.T) {
	c := mustNew(t, Config{Algorithms: []string{"gzip", "br", "zstd"}, MinSize: 1})
	srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(jsonBody(n))
	})
	client := rawClient(t)
	var wg sync.WaitGroup
	for i := range 60 {
		coding := []string{"gzip", "br", "zstd"}[i%3]
		n := 1 + i*997
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"?n="+strconv.Itoa(n), nil)
			req.Header.Set("Accept-Encoding", coding)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			if ce := resp.Header.Get("Content-Encoding"); ce != coding {
				t.Errorf("Content-Encoding %q, want %q", ce, coding)
				return
			}
			got, err := io.ReadAll(decoder(t, coding, resp.Body))
			if err != nil {
				t.Errorf("%s decode: %v", coding, err)
				return
			}
			if !bytes.Equal(got, jsonBody(n)) {
				t.Errorf("%s body of %d bytes differs", coding, n)
			}
		})
	}
	wg.Wait()
}

// TestStreaming checks that nothing is held back beyond a flush: the client
// must decode each chunk while the handler waits for it to say so.
func TestStreaming(t *testing.T) {
	first := []byte("data: first event, shorter than MinSize\n\n")
	second := []byte("data: second event\n\n")
	tests := []struct {
		name        string
		contentType string
		accept      string
		flush       bool // the handler flushes after the first chunk
		wantCoding  string
	}{
		{"gzip flushed", "application/json", "gzip", true, "gzip"},
		{"br flushed", "application/json", "br", true, "br"},
		{"zstd flushed", "application/json", "zstd", true, "zstd"},
		{"identity flushed", "application/json", "identity", true, ""},
		{"identity type not listed", "application/octet-stream", "gzip", true, ""},
		{"event stream gzip without flush", "text/event-stream", "gzip", false, "gzip"},
		{"event stream br without flush", "text/event-stream; charset=utf-8", "br", false, "br"},
		{"event stream zstd without flush", "text/event-stream", "zstd", false, "zstd"},
	}
	c := mustNew(t, Config{Algorithms: []string{"br", "gzip", "zstd"}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proceed := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(proceed) }) }
			srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = w.Write(first)
				if tc.flush {
					if err := http.NewResponseController(w).Flush(); err != nil {
						t.Errorf("flush: %v", err)
					}
				}
				<-proceed
				_, _ = w.Write(second)
			})
			// Runs before the server's cleanup, which waits for the handler:
			// a failing test must not leave it blocked.
			t.Cleanup(release)
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("Accept-Encoding", tc.accept)
			client := rawClient(t)
			var dec io.Reader
			buf := make([]byte, len(first))
			// Everything up to the first chunk happens while the handler
			// waits: even the response headers must not be held back.
			within(t, "headers and first chunk", release, func() {
				defer release()
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { _ = resp.Body.Close() })
				if got := resp.Header.Get("Content-Encoding"); got != tc.wantCoding {
					t.Errorf("Content-Encoding %q, want %q", got, tc.wantCoding)
					return
				}
				r, err := newDecoder(t, tc.wantCoding, resp.Body)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					t.Errorf("read first chunk: %v", err)
					return
				}
				dec = r
			})
			if dec == nil || !bytes.Equal(buf, first) {
				t.Fatalf("first chunk %q, want %q", buf, first)
			}
			rest, err := io.ReadAll(dec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rest, second) {
				t.Errorf("rest %q, want %q", rest, second)
			}
		})
	}
}

// TestVaryAndETag checks the caching headers of compressed and uncompressed
// responses.
func TestVaryAndETag(t *testing.T) {
	body := jsonBody(4096)
	c := mustNew(t, Config{Algorithms: []string{"gzip"}})
	tests := []struct {
		name       string
		accept     string
		hdr        []string // response headers set by the handler
		size       int
		wantCoding string
		wantVary   []string
		wantETag   string
		wantRanges string
	}{
		{"strong ETag weakened", "gzip", []string{"Etag", `"abc"`}, 4096, "gzip", []string{"Accept-Encoding"}, `W/"abc"`, ""},
		{"weak ETag kept", "gzip", []string{"Etag", `W/"abc"`}, 4096, "gzip", []string{"Accept-Encoding"}, `W/"abc"`, ""},
		{"ETag kept when not accepted", "", []string{"Etag", `"abc"`}, 4096, "", []string{"Accept-Encoding"}, `"abc"`, ""},
		{"ETag kept when small", "gzip", []string{"Etag", `"abc"`}, 100, "", []string{"Accept-Encoding"}, `"abc"`, ""},
		{"Vary appended", "gzip", []string{"Vary", "Origin"}, 4096, "gzip", []string{"Origin", "Accept-Encoding"}, "", ""},
		{"Vary not duplicated", "gzip", []string{"Vary", "origin, accept-encoding"}, 4096, "gzip", []string{"origin, accept-encoding"}, "", ""},
		{"Vary star left alone", "gzip", []string{"Vary", "*"}, 4096, "gzip", []string{"*"}, "", ""},
		{"Accept-Ranges dropped when compressed", "gzip", []string{"Accept-Ranges", "bytes"}, 4096, "gzip", []string{"Accept-Encoding"}, "", ""},
		{"Accept-Ranges kept when not", "", []string{"Accept-Ranges", "bytes"}, 4096, "", []string{"Accept-Encoding"}, "", "bytes"},
		{"no Vary for other types", "gzip", []string{"Content-Type", "image/png"}, 4096, "", nil, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				for i := 0; i < len(tc.hdr); i += 2 {
					w.Header().Set(tc.hdr[i], tc.hdr[i+1])
				}
				_, _ = w.Write(body[:tc.size])
			})
			var hdr []string
			if tc.accept != "" {
				hdr = []string{"Accept-Encoding", tc.accept}
			}
			resp, raw := get(t, srv.URL, http.MethodGet, hdr...)
			if got := resp.Header.Get("Content-Encoding"); got != tc.wantCoding {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.wantCoding)
			}
			if got := decode(t, tc.wantCoding, raw); !bytes.Equal(got, body[:tc.size]) {
				t.Fatal("decoded body differs")
			}
			if got := resp.Header.Values("Vary"); strings.Join(got, "|") != strings.Join(tc.wantVary, "|") {
				t.Errorf("Vary %q, want %q", got, tc.wantVary)
			}
			if got := resp.Header.Get("Etag"); got != tc.wantETag {
				t.Errorf("ETag %q, want %q", got, tc.wantETag)
			}
			if got := resp.Header.Get("Accept-Ranges"); got != tc.wantRanges {
				t.Errorf("Accept-Ranges %q, want %q", got, tc.wantRanges)
			}
		})
	}
}

// TestTrailers checks that declared and TrailerPrefix trailers reach the
// client, compressed or not.
func TestTrailers(t *testing.T) {
	c := mustNew(t, Config{Algorithms: []string{"gzip"}})
	tests := []struct {
		name       string
		declare    bool
		size       int
		wantCoding string
	}{
		// A declared trailer ends buffering at once: even a small body is
		// compressed.
		{"declared, large", true, 50_000, "gzip"},
		{"declared, small", true, 100, "gzip"},
		{"prefix only, large", false, 50_000, "gzip"},
		{"prefix only, small", false, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := jsonBody(tc.size)
			srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				if tc.declare {
					w.Header().Set("Trailer", "X-Declared")
				}
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(body)
				if tc.declare {
					w.Header().Set("X-Declared", "d1")
				}
				w.Header().Set(http.TrailerPrefix+"X-Late", "l1")
			})
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := rawClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header.Get("Content-Encoding"); got != tc.wantCoding {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.wantCoding)
			}
			if got := decode(t, tc.wantCoding, raw); !bytes.Equal(got, body) {
				t.Fatal("decoded body differs")
			}
			if got := resp.Trailer.Get("X-Late"); got != "l1" {
				t.Errorf("trailer X-Late %q, want l1 (trailers %v)", got, resp.Trailer)
			}
			if tc.declare {
				if got := resp.Trailer.Get("X-Declared"); got != "d1" {
					t.Errorf("trailer X-Declared %q, want d1 (trailers %v)", got, resp.Trailer)
				}
				if got := resp.Header.Get("X-Declared"); got != "" {
					t.Errorf("declared trailer leaked into the header: %q", got)
				}
			}
		})
	}
}

// TestInformational checks that a 103 Early Hints passes through before the
// final, compressed response.
func TestInformational(t *testing.T) {
	body := jsonBody(4096)
	c := mustNew(t, Config{Algorithms: []string{"gzip"}})
	srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write(body)
	})
	var got1xx []int
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got1xx = append(got1xx, code)
		if h.Get("Content-Encoding") != "" {
			t.Errorf("1xx with Content-Encoding %q", h.Get("Content-Encoding"))
		}
		return nil
	}}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := rawClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if len(got1xx) != 1 || got1xx[0] != http.StatusEarlyHints {
		t.Errorf("informational responses %v, want [103]", got1xx)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("final response %d %q, want 200 gzip", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	if !bytes.Equal(decode(t, "gzip", raw), body) {
		t.Error("decoded body differs")
	}
}

// upgradeBackend answers an Upgrade request with 101 and then echoes lines.
func upgradeBackend(t *testing.T, hijack func(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			t.Errorf("Upgrade %q", r.Header.Get("Upgrade"))
		}
		conn, brw, err := hijack(w)
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		line, err := brw.ReadString('\n')
		if err != nil {
			t.Errorf("read after upgrade: %v", err)
			return
		}
		_, _ = fmt.Fprint(brw, "echo: "+line)
		_ = brw.Flush()
	}
}

// dialUpgrade sends an Upgrade request to addr, checks the 101 and one
// echoed line.
func dialUpgrade(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, _ = fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: echo\r\nAccept-Encoding: gzip, br\r\n\r\n")
	br := bufio.NewReader(conn)
	within(t, "upgrade", func() { _ = conn.Close() }, func() {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("read 101: %v", err)
			return
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("got %d with Content-Encoding %q, want 101 without", resp.StatusCode, resp.Header.Get("Content-Encoding"))
			return
		}
		_, _ = fmt.Fprint(conn, "hello\n")
		line, err := br.ReadString('\n')
		if err != nil || line != "echo: hello\n" {
			t.Errorf("after upgrade read %q, %v; want the echo", line, err)
		}
	})
}

// TestHijack checks upgrades through the wrapped writer: by type assertion,
// by http.ResponseController, and through httputil.ReverseProxy (which
// hijacks the client connection when the backend switches protocols).
func TestHijack(t *testing.T) {
	c := mustNew(t, Config{Algorithms: []string{"gzip", "br"}, MinSize: 1})
	t.Run("Hijacker", func(t *testing.T) {
		srv := serve(t, c, upgradeBackend(t, func(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
			return w.(http.Hijacker).Hijack()
		}))
		dialUpgrade(t, srv.Listener.Addr().String())
	})
	t.Run("ResponseController", func(t *testing.T) {
		srv := serve(t, c, upgradeBackend(t, func(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
			return http.NewResponseController(w).Hijack()
		}))
		dialUpgrade(t, srv.Listener.Addr().String())
	})
	t.Run("ReverseProxy", func(t *testing.T) {
		backend := httptest.NewServer(upgradeBackend(t, func(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
			return http.NewResponseController(w).Hijack()
		}))
		t.Cleanup(backend.Close)
		u, _ := url.Parse(backend.URL)
		front := serve(t, c, httputil.NewSingleHostReverseProxy(u).ServeHTTP)
		dialUpgrade(t, front.Listener.Addr().String())
	})
	t.Run("refused while compressing", func(t *testing.T) {
		srv := serve(t, c, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("compressed"))
			w.(http.Flusher).Flush()
			if _, _, err := w.(http.Hijacker).Hijack(); !errors.Is(err, errHijackCompressing) {
				t.Errorf("hijack error %v, want %v", err, errHijackCompressing)
			}
		})
		resp, raw := get(t, srv.URL, http.MethodGet, "Accept-Encoding", "gzip")
		if got := decode(t, resp.Header.Get("Content-Encoding"), raw); string(got) != "compressed" {
			t.Errorf("body %q", got)
		}
	})
}

// TestReverseProxy runs the usual deployment: httputil.ReverseProxy behind
// Wrap, backends with and without Content-Length, and a backend that
// compressed already.
func TestReverseProxy(t *testing.T) {
	body := jsonBody(200_000)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
		case "/chunked":
			for rest := body; len(rest) > 0; {
				n := min(3000, len(rest))
				_, _ = w.Write(rest[:n])
				w.(http.Flusher).Flush()
				rest = rest[n:]
			}
		case "/encoded":
			w.Header().Set("Content-Encoding", "identity-but-opaque")
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	c := mustNew(t, Config{})
	front := serve(t, c, httputil.NewSingleHostReverseProxy(u).ServeHTTP)
	for _, tc := range []struct{ path, accept, want string }{
		{"/length", "gzip, br", "br"},
		{"/chunked", "gzip", "gzip"},
		{"/encoded", "gzip, br", "identity-but-opaque"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, raw := get(t, front.URL+tc.path, http.MethodGet, "Accept-Encoding", tc.accept)
			got := resp.Header.Get("Content-Encoding")
			if got != tc.want {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.want)
			}
			if got == "identity-but-opaque" {
				got = ""
			}
			if !bytes.Equal(decode(t, got, raw), body) {
				t.Error("decoded body differs")
			}
		})
	}
}

// TestFinish checks finish's contract with a recorder: a second call does
// nothing, writes afterwards fail, and an untouched response stays
// untouched.
func TestFinish(t *testing.T) {
	c := mustNew(t, Config{Algorithms: []string{"gzip"}, MinSize: 1})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept-Encoding", "gzip")

	rec := httptest.NewRecorder()
	w, finish := c.Wrap(rec, req)
	w.Header().Set("Content-Type", "text/plain")
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if err := finish(); err != nil {
		t.Errorf("second finish: %v", err)
	}
	if _, err := w.Write([]byte("late")); !errors.Is(err, errFinished) {
		t.Errorf("write after finish: %v, want %v", err, errFinished)
	}
	if got := string(decode(t, rec.Header().Get("Content-Encoding"), rec.Body.Bytes())); got != "hello" {
		t.Errorf("body %q", got)
	}

	rec = httptest.NewRecorder()
	w, finish = c.Wrap(rec, req)
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 || len(rec.Header()) != 0 || rec.Flushed {
		t.Errorf("untouched response changed: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	if w.(interface{ Unwrap() http.ResponseWriter }).Unwrap() != rec {
		t.Error("Unwrap does not return the wrapped writer")
	}
}
