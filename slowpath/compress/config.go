package compress

import (
	"errors"
	"fmt"
	"math"
	"strings"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Defaults chosen for proxy throughput: fast levels that still compress
// typical web text well. BenchmarkLevels gives the numbers (16 KiB and
// 256 KiB of JSON, one core).
const (
	// DefaultMinSize is the smallest body compressed when Config.MinSize is
	// zero. A smaller body fits in a packet or two either way, and the
	// encoding's CPU time and framing buy too little.
	DefaultMinSize = 1024
	// DefaultGzipLevel is klauspost/compress gzip level 5: about 15% smaller
	// output than level 4 for about 80% of its speed; 6 and up cost much
	// more time for little (nginx users typically pick 4 to 6).
	DefaultGzipLevel = 5
	// DefaultBrotliQuality is brotli quality 4, the highest that uses
	// brotli's quick hash matchers; 5 and up use hash chains and run at
	// about two thirds of the speed. Brotli is several times slower than
	// gzip here at a similar ratio, so a configuration that cares about
	// CPU should list gzip or zstd first.
	DefaultBrotliQuality = 4
	// DefaultZstdLevel is zstd level 3, zstd's own default: as fast as
	// level 1 here and smaller, and the fastest coding of the three.
	DefaultZstdLevel = 3
)

// Algorithm names as they appear in configuration and in Content-Encoding.
const (
	Gzip   = "gzip"
	Brotli = "br"
	Zstd   = "zstd"
)

// defaultContentTypes is the list used when Config.ContentTypes is empty: the
// ProxyGateway CRD's documented default (text/*, application/json,
// application/javascript, application/xml, image/svg+xml) and other textual
// types that browsers and APIs commonly fetch.
var defaultContentTypes = []string{
	"text/",
	"application/javascript",
	"application/json",
	"application/xml",
	"application/xhtml+xml",
	"application/atom+xml",
	"application/rss+xml",
	"application/ld+json",
	"application/manifest+json",
	"application/problem+json",
	"application/wasm",
	"image/svg+xml",
	"font/otf",
	"font/ttf",
}

// Config is one compression configuration.
type Config struct {
	// Algorithms are the codings offered, in the server's order of
	// preference: "gzip", "br" and "zstd" (the values the CRD allows).
	// Empty means br then gzip. (The CRD's own default, gzip alone, is
	// filled in by the snapshot builder, so this one applies only to
	// configurations built by hand.)
	Algorithms []string
	// MinSize is the smallest body, in bytes, that is compressed. Zero means
	// DefaultMinSize (1024); use 1 to compress every non-empty body.
	MinSize int
	// ContentTypes lists the compressible media types. Each entry matches,
	// case-insensitively and ignoring parameters, every media type it is a
	// prefix of (as the CRD documents: "text/" matches text/html);
	// "type/*" is the same as "type/", and "*" or "*/*" matches every type.
	// gRPC (application/grpc*) is never compressed, whatever the list says.
	// Empty means a default list: text/*, application/javascript,
	// application/json, application/xml, image/svg+xml and a few other
	// textual types (XHTML, Atom, RSS, JSON-LD, web manifests, problem
	// details, WebAssembly, OpenType and TrueType fonts).
	ContentTypes []string
	// GzipLevel is the gzip level, 1 (fastest) to 9. Zero means
	// DefaultGzipLevel (5).
	GzipLevel int
	// BrotliQuality is the brotli quality, 1 to 11. Zero means
	// DefaultBrotliQuality (4); brotli's quality 0 cannot be chosen.
	BrotliQuality int
	// ZstdLevel is the zstd level, 1 to 22, mapped to the nearest of the
	// four speeds the encoder implements (1-2 fastest, 3-5 default, 6-9
	// better, 10+ best). Zero means DefaultZstdLevel (3).
	ZstdLevel int
}

// FromProto converts a snapshot's compression settings. A nil c yields the
// zero Config (every default). Errors name the offending field, e.g.
// `compression.algorithms[1]: unknown algorithm "deflate"`.
func FromProto(c *pb.Compression) (Config, error) {
	cfg := Config{
		Algorithms:   c.GetAlgorithms(),
		MinSize:      int(min(c.GetMinSize(), math.MaxInt32)),
		ContentTypes: c.GetContentTypes(),
	}
	if _, err := cfg.compile("compression."); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// ErrInvalidConfig is wrapped by every error that FromProto and New return
// for a configuration they cannot use.
var ErrInvalidConfig = errors.New("invalid compression configuration")

// compiled is a validated Config with defaults applied.
type compiled struct {
	prefs   []algorithm
	minSize int
	types   []string // lower-case prefixes; "" matches everything
	levels  [numAlgorithms]int
}

// compile validates cfg and applies defaults; field names in errors start
// with prefix.
func (cfg Config) compile(prefix string) (compiled, error) {
	var out compiled
	var seen [numAlgorithms]bool
	for i, name := range cfg.Algorithms {
		a, ok := algorithmByName(name)
		if !ok {
			return out, fmt.Errorf("%salgorithms[%d]: unknown algorithm %q (want gzip, br or zstd): %w", prefix, i, name, ErrInvalidConfig)
		}
		// Duplicates are dropped rather than rejected: the CRD declares the
		// list a set, so one can only come from a hand-written snapshot,
		// and the intent is plain.
		if !seen[a] {
			seen[a] = true
			out.prefs = append(out.prefs, a)
		}
	}
	if len(out.prefs) == 0 {
		out.prefs = []algorithm{algBrotli, algGzip}
	}

	switch {
	case cfg.MinSize < 0:
		return out, fmt.Errorf("%smin_size: %d is negative: %w", prefix, cfg.MinSize, ErrInvalidConfig)
	case cfg.MinSize == 0:
		out.minSize = DefaultMinSize
	default:
		out.minSize = cfg.MinSize
	}

	types := cfg.ContentTypes
	if len(types) == 0 {
		types = defaultContentTypes
	}
	for i, t := range types {
		p, ok := normalizeTypePattern(t)
		if !ok {
			return out, fmt.Errorf("%scontent_types[%d]: %q is not a media type or prefix: %w", prefix, i, t, ErrInvalidConfig)
		}
		out.types = append(out.types, p)
	}

	levels := [numAlgorithms]struct {
		field    string
		val      int
		def      int
		min, max int
	}{
		algGzip:   {"gzip_level", cfg.GzipLevel, DefaultGzipLevel, 1, 9},
		algBrotli: {"brotli_quality", cfg.BrotliQuality, DefaultBrotliQuality, 1, 11},
		algZstd:   {"zstd_level", cfg.ZstdLevel, DefaultZstdLevel, 1, 22},
	}
	for a, l := range levels {
		switch {
		case l.val == 0:
			out.levels[a] = l.def
		case l.val < l.min || l.val > l.max:
			return out, fmt.Errorf("%s%s: %d is outside %d..%d: %w", prefix, l.field, l.val, l.min, l.max, ErrInvalidConfig)
		default:
			out.levels[a] = l.val
		}
	}
	return out, nil
}

// normalizeTypePattern turns a configured content type into the lower-case
// prefix matched against response media types.
func normalizeTypePattern(s string) (string, bool) {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "":
		return "", false
	case s == "*" || s == "*/*":
		return "", true
	case strings.HasSuffix(s, "/*"):
		s = strings.TrimSuffix(s, "*")
	}
	if strings.ContainsAny(s, " \t*,\"") {
		return "", false
	}
	return s, true
}
