package compress

import (
	"fmt"
	"io"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// encoder is what gzip.Writer, brotli.Writer and zstd.Encoder have in common.
type encoder interface {
	io.WriteCloser
	Flush() error
	Reset(w io.Writer)
}

var (
	_ encoder = (*gzip.Writer)(nil)
	_ encoder = (*brotli.Writer)(nil)
	_ encoder = (*zstd.Encoder)(nil)
)

// Window sizes bound the memory a pooled encoder keeps: every encoder in use
// holds about one window of history, and a busy proxy has thousands of
// responses in flight. Web responses rarely gain from longer matches.
const (
	brotliLGWin    = 19      // 512 KiB, ngx_brotli's default window
	zstdWindowSize = 1 << 20 // RFC 9659 asks for at most 8 MiB
)

// pooledEncoder is an encoder with the indirection it writes through, so
// that a pooled encoder can drop its reference to the last response (and its
// connection) without a Reset.
type pooledEncoder struct {
	enc encoder
	dst sink
}

// sink forwards to the current response; w is nil while pooled.
type sink struct{ w io.Writer }

func (s *sink) Write(p []byte) (int, error) { return s.w.Write(p) }

type poolKey struct {
	alg   algorithm
	level int
}

// pools holds one *sync.Pool per poolKey. It is package-level so encoders
// (and the memory their windows hold) are shared by every Compressor and
// outlive configuration reloads; the set of keys is small and bounded by the
// valid levels.
var pools sync.Map

// poolFor returns the pool for alg at level, checking that an encoder can be
// built with those settings.
func poolFor(alg algorithm, level int) (*sync.Pool, error) {
	key := poolKey{alg, level}
	if p, ok := pools.Load(key); ok {
		return p.(*sync.Pool), nil
	}
	// Build one encoder now so an invalid level fails here and not inside
	// sync.Pool.New, where it could only panic.
	first, err := newEncoder(alg, level)
	if err != nil {
		return nil, err
	}
	p := &sync.Pool{New: func() any {
		pe, err := newEncoder(alg, level)
		if err != nil {
			panic(fmt.Sprintf("compress: %v encoder at level %d failed after succeeding once: %v", alg, level, err))
		}
		return pe
	}}
	p.Put(first)
	actual, _ := pools.LoadOrStore(key, p)
	return actual.(*sync.Pool), nil
}

func newEncoder(alg algorithm, level int) (*pooledEncoder, error) {
	pe := &pooledEncoder{}
	switch alg {
	case algGzip:
		w, err := gzip.NewWriterLevel(&pe.dst, level)
		if err != nil {
			return nil, fmt.Errorf("new gzip writer: %w", err)
		}
		pe.enc = w
	case algBrotli:
		pe.enc = brotli.NewWriterOptions(&pe.dst, brotli.WriterOptions{Quality: level, LGWin: brotliLGWin})
	case algZstd:
		w, err := zstd.NewWriter(&pe.dst,
			zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
			// One goroutine per response: the request's own. The default
			// starts GOMAXPROCS goroutines per encoder.
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(zstdWindowSize),
			// Grow history as data arrives rather than up front, so
			// small responses do not pay for the whole window.
			zstd.WithLowerEncoderMem(true),
		)
		if err != nil {
			return nil, fmt.Errorf("new zstd writer: %w", err)
		}
		pe.enc = w
	default:
		return nil, fmt.Errorf("unknown algorithm %d", alg)
	}
	return pe, nil
}

// getEncoder takes an encoder from p, ready to compress a new stream to w.
func getEncoder(p *sync.Pool, w io.Writer) *pooledEncoder {
	pe := p.Get().(*pooledEncoder)
	pe.dst.w = w
	pe.enc.Reset(&pe.dst)
	return pe
}

// putEncoder returns pe to p. The stream must be closed or abandoned; the
// next getEncoder resets it.
func putEncoder(p *sync.Pool, pe *pooledEncoder) {
	pe.dst.w = nil
	p.Put(pe)
}

// bufPool holds the buffers that collect a body of unknown length until it
// reaches MinSize.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuf keeps a huge configured MinSize from pinning huge buffers.
const maxPooledBuf = 64 << 10
