package compress

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// serve starts a loopback server whose handler runs behind c.Wrap. Errors
// from finish are reported to the test.
func serve(t *testing.T, c *Compressor, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw, finish := c.Wrap(w, r)
		h(cw, r)
		if err := finish(); err != nil {
			t.Errorf("finish: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// rawClient sees the bytes on the wire: no transparent gzip.
func rawClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get sends method to url with the given headers ("Name", "value" pairs) and
// returns the response with its raw body read.
func get(t *testing.T, url, method string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := rawClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// decoder returns a reader that decodes the coding named by a
// Content-Encoding value ("" is identity). gzip is decoded with the
// standard library, independently of the encoder.
func decoder(t *testing.T, coding string, r io.Reader) io.Reader {
	t.Helper()
	dec, err := newDecoder(t, coding, r)
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

// newDecoder is decoder for goroutines other than the test's: it reports
// errors instead of failing.
func newDecoder(t *testing.T, coding string, r io.Reader) (io.Reader, error) {
	switch coding {
	case "":
		return r, nil
	case "gzip":
		zr, err := stdgzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip header: %w", err)
		}
		return zr, nil
	case "br":
		return brotli.NewReader(r), nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd reader: %w", err)
		}
		t.Cleanup(zr.Close)
		return zr, nil
	}
	return nil, fmt.Errorf("unexpected Content-Encoding %q", coding)
}

// decode decodes a whole body.
func decode(t *testing.T, coding string, raw []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(decoder(t, coding, bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("decode %s: %v", coding, err)
	}
	return out
}

// jsonBody returns about n bytes of deterministic JSON-like text, varied
// enough that it does not compress to nothing.
func jsonBody(n int) []byte {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"%s-%s","score":%d,"active":%t}`,
			rng.IntN(1_000_000), words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(1000), rng.IntN(2) == 0)
	}
	b.WriteString("]")
	return b.Bytes()[:n]
}

// within fails the test if f does not return before a generous deadline. It
// only turns a hang into a clear failure; no result depends on timing. On
// timeout it calls unblock, which must make f return, and waits for f so
// that f never outlives the test.
func within(t *testing.T, what string, unblock, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		unblock()
		<-done
		t.Fatalf("%s: still blocked after a minute", what)
	}
}

// mustNew is New that fails the test on error.
func mustNew(t testing.TB, cfg Config) *Compressor {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
