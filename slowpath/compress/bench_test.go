package compress

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing, so benchmarks measure
// Wrap and the encoder alone.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (d *discardWriter) Header() http.Header  { return d.h }
func (d *discardWriter) WriteHeader(code int) { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// BenchmarkWrap measures one 16 KiB JSON response through Wrap, Write and
// finish, per coding. Allocations come from Wrap (the writer and its finish
// func) and the headers it sets; encoders and buffers come from pools.
func BenchmarkWrap(b *testing.B) {
	body := jsonBody(16 << 10)
	ct := []string{"application/json"}
	for _, coding := range []string{"gzip", "br", "zstd", "identity"} {
		b.Run(coding, func(b *testing.B) {
			c := mustNew(b, Config{Algorithms: []string{"gzip", "br", "zstd"}})
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("Accept-Encoding", coding)
			dw := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				clear(dw.h)
				dw.h["Content-Type"] = ct
				dw.n = 0
				w, finish := c.Wrap(dw, req)
				if _, err := w.Write(body); err != nil {
					b.Fatal(err)
				}
				if err := finish(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(dw.n)/float64(len(body)), "ratio")
		})
	}
}

// BenchmarkLevels compares levels on 16 KiB and 256 KiB of JSON; it is how
// the defaults were chosen (throughput against the ratio metric).
func BenchmarkLevels(b *testing.B) {
	for _, size := range []int{16 << 10, 256 << 10} {
		body := jsonBody(size)
		for _, tc := range []struct {
			alg    algorithm
			levels []int
		}{
			{algGzip, []int{1, 4, 5, 6, 9}},
			{algBrotli, []int{1, 3, 4, 5, 6}},
			{algZstd, []int{1, 3, 6}},
		} {
			for _, level := range tc.levels {
				b.Run(fmt.Sprintf("%dKiB/%v-%d", size>>10, tc.alg, level), func(b *testing.B) {
					p, err := poolFor(tc.alg, level)
					if err != nil {
						b.Fatal(err)
					}
					var out bytes.Buffer
					b.SetBytes(int64(len(body)))
					for b.Loop() {
						out.Reset()
						pe := getEncoder(p, &out)
						_, _ = pe.enc.Write(body)
						_ = pe.enc.Close()
						putEncoder(p, pe)
					}
					b.ReportMetric(float64(out.Len())/float64(len(body)), "ratio")
				})
			}
		}
	}
}

var _ io.Writer = (*discardWriter)(nil)
