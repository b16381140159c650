package compress

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestFromProto(t *testing.T) {
	tests := []struct {
		name    string
		in      *pb.Compression
		want    Config
		wantErr string
	}{
		{name: "nil is every default", in: nil, want: Config{}},
		{
			name: "as the snapshot builder fills it",
			in: &pb.Compression{
				Algorithms:   []string{"gzip"},
				MinSize:      1024,
				ContentTypes: []string{"text/", "application/json", "application/javascript", "application/xml", "image/svg+xml"},
			},
			want: Config{
				Algorithms:   []string{"gzip"},
				MinSize:      1024,
				ContentTypes: []string{"text/", "application/json", "application/javascript", "application/xml", "image/svg+xml"},
			},
		},
		{
			name: "all algorithms",
			in:   &pb.Compression{Algorithms: []string{"zstd", "br", "gzip"}, MinSize: 1},
			want: Config{Algorithms: []string{"zstd", "br", "gzip"}, MinSize: 1},
		},
		{
			name: "huge min size is clamped",
			in:   &pb.Compression{MinSize: 1 << 40},
			want: Config{MinSize: 1<<31 - 1},
		},
		{
			name:    "unknown algorithm names the field",
			in:      &pb.Compression{Algorithms: []string{"gzip", "deflate"}},
			wantErr: `compression.algorithms[1]: unknown algorithm "deflate" (want gzip, br or zstd): invalid compression configuration`,
		},
		{
			name:    "empty content type names the field",
			in:      &pb.Compression{ContentTypes: []string{"text/", " "}},
			wantErr: `compression.content_types[1]: " " is not a media type or prefix: invalid compression configuration`,
		},
		{
			name:    "content type with a list in it",
			in:      &pb.Compression{ContentTypes: []string{"text/html, text/css"}},
			wantErr: `compression.content_types[0]: "text/html, text/css" is not a media type or prefix: invalid compression configuration`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromProto(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error %v does not wrap ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FromProto (-want +got):\n%s", diff)
			}
			if _, err := New(got); err != nil {
				t.Errorf("New(FromProto(...)): %v", err)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    compiled
		wantErr string
	}{
		{
			name: "defaults",
			cfg:  Config{},
			want: compiled{
				prefs:   []algorithm{algBrotli, algGzip},
				minSize: 1024,
				types:   defaultContentTypes,
				levels:  [numAlgorithms]int{algGzip: 5, algBrotli: 4, algZstd: 3},
			},
		},
		{
			name: "normalised types, duplicates dropped, levels kept",
			cfg: Config{
				Algorithms:    []string{"GZIP", "br", "gzip"},
				MinSize:       10,
				ContentTypes:  []string{"Text/*", "application/JSON; charset=utf-8", "*/*", "*"},
				GzipLevel:     9,
				BrotliQuality: 11,
				ZstdLevel:     1,
			},
			want: compiled{
				prefs:   []algorithm{algGzip, algBrotli},
				minSize: 10,
				types:   []string{"text/", "application/json", "", ""},
				levels:  [numAlgorithms]int{algGzip: 9, algBrotli: 11, algZstd: 1},
			},
		},
		{name: "negative min size", cfg: Config{MinSize: -1}, wantErr: "min_size: -1 is negative: invalid compression configuration"},
		{name: "gzip level too high", cfg: Config{GzipLevel: 10}, wantErr: "gzip_level: 10 is outside 1..9: invalid compression configuration"},
		{name: "gzip level negative", cfg: Config{GzipLevel: -2}, wantErr: "gzip_level: -2 is outside 1..9: invalid compression configuration"},
		{name: "brotli quality too high", cfg: Config{BrotliQuality: 12}, wantErr: "brotli_quality: 12 is outside 1..11: invalid compression configuration"},
		{name: "zstd level too high", cfg: Config{ZstdLevel: 23}, wantErr: "zstd_level: 23 is outside 1..22: invalid compression configuration"},
		{name: "unknown algorithm", cfg: Config{Algorithms: []string{"lz4"}}, wantErr: `algorithms[0]: unknown algorithm "lz4" (want gzip, br or zstd): invalid compression configuration`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.compile("")
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				if _, err := New(tc.cfg); err == nil || err.Error() != tc.wantErr {
					t.Errorf("New error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(compiled{})); diff != "" {
				t.Errorf("compile (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPoolsOutliveCompressors checks that Compressors with the same levels
// share encoder pools, so a reload keeps the warmed encoders.
func TestPoolsOutliveCompressors(t *testing.T) {
	a := mustNew(t, Config{Algorithms: []string{"gzip", "br", "zstd"}})
	b := mustNew(t, Config{Algorithms: []string{"zstd", "gzip", "br"}, MinSize: 5})
	for alg := range numAlgorithms {
		if a.pools[alg] == nil || a.pools[alg] != b.pools[alg] {
			t.Errorf("%v: pools %p and %p, want the same non-nil pool", alg, a.pools[alg], b.pools[alg])
		}
	}
	c := mustNew(t, Config{Algorithms: []string{"gzip"}, GzipLevel: 1})
	if c.pools[algGzip] == a.pools[algGzip] {
		t.Error("gzip level 1 shares the level 5 pool")
	}
	if c.pools[algBrotli] != nil {
		t.Error("brotli pool set for a gzip-only configuration")
	}
}

// failWriter fails every write, like a connection the client closed.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestEncoderReuseAfterError checks that an encoder whose response failed
// mid-stream compresses the next response correctly once reset, as the pool
// relies on.
func TestEncoderReuseAfterError(t *testing.T) {
	body := jsonBody(300_000)
	for alg := range numAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			pe, err := newEncoder(alg, 1)
			if err != nil {
				t.Fatal(err)
			}
			pe.dst.w = failWriter{}
			pe.enc.Reset(&pe.dst)
			_, werr := pe.enc.Write(body)
			cerr := pe.enc.Close()
			if werr == nil && cerr == nil {
				t.Fatal("no error from a failing connection")
			}
			var out bytes.Buffer
			pe.dst.w = &out
			pe.enc.Reset(&pe.dst)
			if _, err := pe.enc.Write(body); err != nil {
				t.Fatal(err)
			}
			if err := pe.enc.Close(); err != nil {
				t.Fatal(err)
			}
			if got := decode(t, alg.String(), out.Bytes()); !bytes.Equal(got, body) {
				t.Fatalf("decoded %d bytes, want the %d-byte body", len(got), len(body))
			}
		})
	}
}
