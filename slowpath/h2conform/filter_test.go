package h2conform

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

var testParams = params{maxFrame: defaultMaxFrameSize, tableSize: defaultTableSize, maxString: 64 << 10, strictPreface: true}

// frames returns what write puts on the wire.
func frames(write func(fr *http2.Framer)) []byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.AllowIllegalWrites = true
	write(fr)
	return b.Bytes()
}

// block HPACK-encodes fields with a fresh encoder (every field literal).
func block(fields ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return b.Bytes()
}

var request = []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x"}

func req(extra ...string) []byte { return block(append(append([]string{}, request...), extra...)...) }

// readAll reads f to the end in reads of size n.
func readAll(f io.Reader, n int) ([]byte, error) {
	var out []byte
	p := make([]byte, n)
	for {
		m, err := f.Read(p)
		out = append(out, p[:m]...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
	}
}

// sources delivers input whole, a byte at a time and in halves, so every
// test also shows the filter does not depend on how reads are cut.
var sources = []struct {
	name string
	wrap func(io.Reader) io.Reader
	read int
}{
	{"whole", func(r io.Reader) io.Reader { return r }, 64 << 10},
	{"bytewise", iotest.OneByteReader, 1},
	{"halves", iotest.HalfReader, 7},
	{"data+EOF", iotest.DataErrReader, 9},
}

// run passes in through a filter in mode m, for every source shape, and
// checks each gives want.
func run(t *testing.T, m mode, p params, in, want []byte) {
	t.Helper()
	for _, s := range sources {
		var f filter
		f.init(s.wrap(bytes.NewReader(in)), m, p)
		got, err := readAll(&f, s.read)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: output differs:\n%s", s.name, cmp.Diff(want, got))
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want verdict
	}{
		{"empty", "", needMore},
		{"preface start", "PRI * HTTP/2.0\r\n", needMore},
		{"preface", clientPreface, speaksHTTP2},
		{"preface and frames", clientPreface + "\x00\x00\x00\x04", speaksHTTP2},
		{"preface broken after its first line", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", badPreface},
		{"request line", "GET / HTTP/1.1\r\n", speaksHTTP1},
		{"request line without CR", "GET / HTTP/1.0\n", speaksHTTP1},
		{"HTTP/2 request line over HTTP/1", "GET / HTTP/2.0\r\n", speaksHTTP1},
		{"method like PRI", "PRIVATE / HTTP/1.1\r\n", speaksHTTP1},
		{"partial request line", "GET / HTT", needMore},
		{"empty first line", "\r\nGET / HTTP/1.1\r\n", speaksHTTP1},
		{"h2spec invalid preface", "INVALID CONNECTION PREFACE\r\n\r\n", notHTTP},
		{"one word", "HELLO\r\n", notHTTP},
		{"version not last", "GET HTTP/1.1 /\r\n", notHTTP},
		{"long line", "GET /" + strings.Repeat("a", sniffMax) + " HTTP/1.1\r\n", speaksHTTP1},
		{"long garbage", strings.Repeat("a", sniffMax), speaksHTTP1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify([]byte(tc.in)); got != tc.want {
				t.Fatalf("classify(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestSniff(t *testing.T) {
	h1 := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	h2 := append([]byte(clientPreface), frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: req(), EndHeaders: true, EndStream: true})
	})...)
	for _, tc := range []struct {
		name   string
		in     []byte
		strict bool
		want   []byte // nil: closed, nothing handed on
	}{
		{"HTTP/1.1 passes unchanged", h1, true, h1},
		{"HTTP/2 passes unchanged", h2, true, h2},
		{"garbage is closed", []byte("INVALID CONNECTION PREFACE\r\n\r\n"), true, nil},
		{"garbage goes to HTTP/1 when not strict", []byte("INVALID CONNECTION PREFACE\r\n\r\n"), false, []byte("INVALID CONNECTION PREFACE\r\n\r\n")},
		{"broken preface is closed", []byte("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), false, nil},
		{"short input passes at EOF", []byte("GET"), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams
			p.strictPreface = tc.strict
			for _, s := range sources {
				var f filter
				f.init(s.wrap(bytes.NewReader(tc.in)), modeSniff, p)
				got, err := readAll(&f, s.read)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if !bytes.Equal(got, tc.want) {
					t.Fatalf("%s: got %q, want %q", s.name, got, tc.want)
				}
			}
		})
	}
}

// TestTransparent: a valid exchange, including frames the filter holds
// and inspects, reaches the server byte for byte.
func TestTransparent(t *testing.T) {
	big := bytes.Repeat([]byte("d"), defaultMaxFrameSize)
	enc := frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
		_ = fr.WriteSettingsAck()
		_ = fr.WriteWindowUpdate(0, 1<<20)
		b := req("te", "trailers", "user-agent", "t")
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:5], Priority: http2.PriorityParam{StreamDep: 0, Weight: 15}})
		_ = fr.WriteContinuation(1, false, b[5:9])
		_ = fr.WriteContinuation(1, true, b[9:])
		_ = fr.WriteData(1, false, big)
		_ = fr.WriteDataPadded(1, false, []byte("x"), []byte{0, 0, 0})
		_ = fr.WriteData(1, true, nil)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: req(), EndHeaders: true, PadLength: 4})
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 3, Weight: 1})
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WriteRawFrame(0x42, 0, 0, []byte("unknown extension frame"))
		_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	})
	in := append([]byte(clientPreface), enc...)
	run(t, modePreface, testParams, in, in)
}

func TestSettings(t *testing.T) {
	s := func(id http2.SettingID, v uint32) http2.Setting { return http2.Setting{ID: id, Val: v} }
	const (
		window = http2.SettingInitialWindowSize
		push   = http2.SettingEnablePush
		table  = http2.SettingHeaderTableSize
		frame  = http2.SettingMaxFrameSize
	)
	many := make([]http2.Setting, maxSettingsPerFrame+1)
	for i := range many {
		many[i] = s(window, 1)
	}
	for _, tc := range []struct {
		name    string
		in, out []http2.Setting
	}{
		{"no repeat: unchanged", []http2.Setting{s(window, 100), s(table, 0)}, []http2.Setting{s(window, 100), s(table, 0)}},
		{"repeat: last value kept", []http2.Setting{s(window, 100), s(window, 1)}, []http2.Setting{s(window, 1)}},
		{"repeats among others keep their place", []http2.Setting{s(window, 5), s(table, 0), s(push, 0), s(window, 7), s(table, 100)}, []http2.Setting{s(push, 0), s(window, 7), s(table, 100)}},
		{"unknown parameters too", []http2.Setting{s(0x99, 1), s(0x99, 2), s(window, 3)}, []http2.Setting{s(0x99, 2), s(window, 3)}},
		{"invalid window kept alone", []http2.Setting{s(table, 0), s(window, 1<<31), s(window, 1)}, []http2.Setting{s(window, 1<<31)}},
		{"first invalid kept alone", []http2.Setting{s(push, 2), s(frame, 1), s(push, 1)}, []http2.Setting{s(push, 2)}},
		{"invalid without repeat: unchanged", []http2.Setting{s(push, 2)}, []http2.Setting{s(push, 2)}},
		{"over 100 entries: unchanged", many, many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			around := func(fr *http2.Framer, ss []http2.Setting) {
				_ = fr.WritePing(false, [8]byte{})
				_ = fr.WriteSettings(ss...)
				_ = fr.WriteWindowUpdate(0, 1)
			}
			in := frames(func(fr *http2.Framer) { around(fr, tc.in) })
			want := frames(func(fr *http2.Framer) { around(fr, tc.out) })
			p := testParams
			run(t, modeFrames, p, in, want)
		})
	}
}

// TestHeaders: a malformed request (RFC 9113 §8.2.2) gets the two Host
// fields appended to its header block; any other passes unchanged.
func TestHeaders(t *testing.T) {
	bad := req("connection", "keep-alive")
	mal := malformedFields[:]
	cat := func(b ...[]byte) []byte { return bytes.Join(b, nil) }
	// A block that fills a frame to within a few bytes ('~' has no
	// shorter Huffman code, so the length is exact).
	var full []byte
	for n := defaultMaxFrameSize; len(full) == 0 || len(full) > defaultMaxFrameSize; n-- {
		full = req("x-fill", strings.Repeat("~", n), "upgrade", "h2c")
	}
	if len(full) <= defaultMaxFrameSize-len(mal) {
		t.Fatalf("full block is %d bytes; want it to leave no room for %d more", len(full), len(mal))
	}
	hdr := func(b []byte, end bool, pad uint8) http2.HeadersFrameParam {
		return http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndHeaders: end, EndStream: true, PadLength: pad}
	}
	for _, tc := range []struct {
		name      string
		in, want  func(fr *http2.Framer)
		unchanged bool
	}{
		{name: "valid request", unchanged: true, in: func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(req("te", "trailers"), true, 0)) }},
		{name: "te empty", unchanged: true, in: func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(req("te", ""), true, 0)) }},
		{name: "uppercase name is the server's to reset", unchanged: true, in: func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(req("Connection", "x"), true, 0)) }},
		{
			name: "connection",
			in:   func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(bad, true, 0)) },
			want: func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(cat(bad, mal), true, 0)) },
		},
		{
			name: "te other than trailers",
			in:   func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(req("te", "trailers, deflate"), true, 0)) },
			want: func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(cat(req("te", "trailers, deflate"), mal), true, 0)) },
		},
		{
			name: "padded, with priority",
			in: func(fr *http2.Framer) {
				p := hdr(bad, true, 7)
				p.Priority = http2.PriorityParam{StreamDep: 0, Weight: 200, Exclusive: true}
				_ = fr.WriteHeaders(p)
			},
			want: func(fr *http2.Framer) {
				p := hdr(cat(bad, mal), true, 7)
				p.Priority = http2.PriorityParam{StreamDep: 0, Weight: 200, Exclusive: true}
				_ = fr.WriteHeaders(p)
			},
		},
		{
			name: "field split across CONTINUATION",
			in: func(fr *http2.Framer) {
				_ = fr.WriteHeaders(hdr(bad[:len(bad)-8], false, 0))
				_ = fr.WriteContinuation(1, true, bad[len(bad)-8:])
			},
			want: func(fr *http2.Framer) {
				_ = fr.WriteHeaders(hdr(bad[:len(bad)-8], false, 0))
				_ = fr.WriteContinuation(1, true, cat(bad[len(bad)-8:], mal))
			},
		},
		{
			name: "full frame: a CONTINUATION of the filter's own",
			in:   func(fr *http2.Framer) { _ = fr.WriteHeaders(hdr(full, true, 0)) },
			want: func(fr *http2.Framer) {
				_ = fr.WriteHeaders(hdr(full, false, 0))
				_ = fr.WriteContinuation(1, true, mal)
			},
		},
		{
			name:      "padding longer than the frame: the server decodes nothing",
			unchanged: true,
			in: func(fr *http2.Framer) {
				_ = fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPadded, 1, cat([]byte{200}, bad))
			},
		},
		{
			name:      "a frame inside a header block: the filter steps aside",
			unchanged: true,
			in: func(fr *http2.Framer) {
				_ = fr.WriteHeaders(hdr(bad[:4], false, 0))
				_ = fr.WritePing(false, [8]byte{})
				_ = fr.WriteContinuation(1, true, bad[4:])
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: bad, EndHeaders: true})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := frames(tc.in)
			want := in
			if !tc.unchanged {
				want = frames(tc.want)
			}
			// A frame after the block shows nothing is lost or reordered.
			tail := frames(func(fr *http2.Framer) { _ = fr.WriteData(1, true, []byte("tail")) })
			run(t, modeFrames, testParams, cat(in, tail), cat(want, tail))
		})
	}
}

// TestHeadersDynamicTable: the mirror decoder follows the client's HPACK
// dynamic table, so a connection-specific field sent as an index into it
// is still seen, and a block the filter extended leaves the table as the
// client has it.
func TestHeadersDynamicTable(t *testing.T) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	encode := func(fields ...string) []byte {
		b.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(b.Bytes())
	}
	first := encode(append(append([]string{}, request...), "connection", "close")...)
	second := encode(append(append([]string{}, request...), "connection", "close")...) // indexed
	third := encode(append(append([]string{}, request...), "accept", "*/*")...)
	if len(second) >= len(first) {
		t.Fatalf("second block (%d bytes) does not use the dynamic table (first %d)", len(second), len(first))
	}
	write := func(fr *http2.Framer, blocks ...[]byte) {
		for i, bl := range blocks {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: bl, EndHeaders: true, EndStream: true})
		}
	}
	in := frames(func(fr *http2.Framer) { write(fr, first, second, third) })
	mal := malformedFields[:]
	want := frames(func(fr *http2.Framer) {
		write(fr, append(bytes.Clone(first), mal...), append(bytes.Clone(second), mal...), third)
	})
	run(t, modeFrames, testParams, in, want)
}

// TestHPACKError: after a block the server cannot decode (it fails the
// connection) the filter inspects nothing more.
func TestHPACKError(t *testing.T) {
	in := frames(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: req("connection", "x"), EndHeaders: true})
	})
	run(t, modeFrames, testParams, in, in)
}

// TestOversizedFrame: a frame over SETTINGS_MAX_FRAME_SIZE is the server's
// FRAME_SIZE_ERROR; the filter passes it and what follows untouched.
func TestOversizedFrame(t *testing.T) {
	big := req("x-big", strings.Repeat("~", defaultMaxFrameSize), "connection", "x")
	in := frames(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: big, EndHeaders: true})
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	})
	run(t, modeFrames, testParams, in, in)
}

// timeoutReader fails its first read with a timeout, as a read aborted by
// a past deadline does, then reads on.
type timeoutReader struct {
	r    io.Reader
	done bool
}

func (t *timeoutReader) Read(p []byte) (int, error) {
	if !t.done {
		t.done = true
		return 0, &net.OpError{Op: "read", Err: errTimeout{}}
	}
	return t.r.Read(p)
}

type errTimeout struct{}

func (errTimeout) Error() string { return "i/o timeout" }
func (errTimeout) Timeout() bool { return true }

// TestErrorsAreNotSticky: an error of the source reaches the reader and the
// next read carries on where the last stopped, in every mode.
func TestErrorsAreNotSticky(t *testing.T) {
	h2 := append([]byte(clientPreface), frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: 1, Val: 1}, http2.Setting{ID: 1, Val: 2})
		_ = fr.WriteData(1, true, []byte("abc"))
	})...)
	for _, tc := range []struct {
		name string
		m    mode
		in   []byte
	}{
		{"sniff", modeSniff, []byte("GET / HTTP/1.1\r\n\r\n")},
		{"preface", modePreface, h2},
		{"frames", modeFrames, h2[len(clientPreface):]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole filter
			whole.init(bytes.NewReader(tc.in), tc.m, testParams)
			want, _ := readAll(&whole, 1024)
			for cut := 0; cut <= len(tc.in); cut++ {
				src := io.MultiReader(bytes.NewReader(tc.in[:cut]), &timeoutReader{r: bytes.NewReader(tc.in[cut:])})
				var f filter
				f.init(iotest.OneByteReader(src), tc.m, testParams)
				var got []byte
				p := make([]byte, 3)
				timeouts := 0
				for {
					n, err := f.Read(p)
					got = append(got, p[:n]...)
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						timeouts++
						continue
					}
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatalf("cut %d: %v", cut, err)
					}
				}
				if timeouts != 1 || !bytes.Equal(got, want) {
					t.Fatalf("cut %d: %d timeouts, got %q, want %q", cut, timeouts, got, want)
				}
			}
		})
	}
}

// loopReader serves b over and over.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

// TestCommonPathAllocs: DATA, WINDOW_UPDATE, PING and SETTINGS (even one
// the filter rewrites) cost no allocation.
func TestCommonPathAllocs(t *testing.T) {
	batch := frames(func(fr *http2.Framer) {
		_ = fr.WriteData(1, false, bytes.Repeat([]byte("d"), defaultMaxFrameSize))
		_ = fr.WriteData(1, false, []byte("small"))
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WritePing(false, [8]byte{})
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 2})
		_ = fr.WriteSettingsAck()
	})
	for _, readSize := range []int{9, 4096, 64 << 10} {
		var f filter
		f.init(&loopReader{b: batch}, modeFrames, testParams)
		p := make([]byte, readSize)
		// One pass first, so that the buffer is in place.
		if _, err := io.ReadFull(&f, make([]byte, 10*len(batch))); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(50, func() {
			for range len(batch) / readSize {
				if _, err := f.Read(p); err != nil {
					t.Fatal(err)
				}
			}
		})
		if allocs != 0 {
			t.Errorf("read size %d: %v allocations per batch of frames, want 0", readSize, allocs)
		}
	}
}

// FuzzFilter: whatever arrives, the filter does not panic, and its output
// does not depend on how the input is cut into reads.
func FuzzFilter(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), uint8(0))
	f.Add([]byte("INVALID CONNECTION PREFACE\r\n\r\n"), uint8(0))
	f.Add(append([]byte(clientPreface), frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: 4, Val: 100}, http2.Setting{ID: 4, Val: 1})
		b := req("connection", "x")
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], PadLength: 2})
		_ = fr.WriteContinuation(1, true, b[3:])
		_ = fr.WriteData(1, true, []byte("body"))
	})...), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, m uint8) {
		md := []mode{modeSniff, modePreface, modeFrames}[int(m)%3]
		var a filter
		a.init(bytes.NewReader(in), md, testParams)
		want, err := readAll(&a, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		var b filter
		b.init(iotest.OneByteReader(bytes.NewReader(in)), md, testParams)
		got, err := readAll(&b, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("output depends on read sizes:\n%s", cmp.Diff(want, got))
		}
	})
}

// BenchmarkDataFrames reads 16 KiB DATA frames the way x/net's framer
// does (header, then payload), straight from the source and through the
// filter.
func BenchmarkDataFrames(b *testing.B) {
	batch := frames(func(fr *http2.Framer) {
		for range 8 {
			_ = fr.WriteData(1, false, bytes.Repeat([]byte("d"), defaultMaxFrameSize))
			_ = fr.WriteWindowUpdate(1, defaultMaxFrameSize)
		}
	})
	readFrames := func(b *testing.B, r io.Reader) {
		hdr := make([]byte, frameHeaderLen)
		payload := make([]byte, defaultMaxFrameSize)
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			for range 16 {
				if _, err := io.ReadFull(r, hdr); err != nil {
					b.Fatal(err)
				}
				n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
				if _, err := io.ReadFull(r, payload[:n]); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("direct", func(b *testing.B) { readFrames(b, &loopReader{b: batch}) })
	b.Run("filtered", func(b *testing.B) {
		var f filter
		f.init(&loopReader{b: batch}, modeFrames, testParams)
		readFrames(b, &f)
	})
}
