package httphead

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

var errTest = errors.New("malformed")

func TestHeadEnd(t *testing.T) {
	tests := []struct {
		name string
		b    string
		from int
		want int
	}{
		{"CRLF head", "GET / HTTP/1.1\r\nHost: h\r\n\r\nbody", 0, 27},
		{"LF head", "GET / HTTP/1.1\nHost: h\n\nbody", 0, 24},
		{"mixed line ends", "GET / HTTP/1.1\r\nHost: h\n\r\n", 0, 26},
		{"incomplete", "GET / HTTP/1.1\r\nHost: h\r\n", 0, -1},
		{"incomplete final CR", "GET / HTTP/1.1\r\nHost: h\r\n\r", 0, -1},
		{"no line end", "GET / HTTP/1.1", 0, -1},
		{"empty", "", 0, -1},
		{"empty trailer CRLF", "\r\nnext", 0, 2},
		{"empty trailer LF", "\nnext", 0, 1},
		{"resumed scan", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 23, 27},
		{"resumed from the end of a line", "GET / HTTP/1.1\nHost: h\n\n", 22, 24},
		{"bare CR is no line end", "GET / HTTP/1.1\r\r\r\n", 0, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HeadEnd([]byte(tc.b), tc.from); got != tc.want {
				t.Errorf("HeadEnd(%q, %d) = %d, want %d", tc.b, tc.from, got, tc.want)
			}
		})
	}
}

func TestScanFields(t *testing.T) {
	tests := []struct {
		name   string
		block  string
		noFold bool
		want   http.Header // nil: an error
	}{
		{"canonical keys, OWS trimmed", "host: h\r\nX-MULTI: a\r\nx-multi:b\r\nX-Sp: \t v w \t\r\n\r\n", true,
			http.Header{"Host": {"h"}, "X-Multi": {"a", "b"}, "X-Sp": {"v w"}}},
		{"empty value", "X-E:\r\n\r\n", true, http.Header{"X-E": {""}}},
		{"LF only", "A: 1\nB: 2\n\n", true, http.Header{"A": {"1"}, "B": {"2"}}},
		{"no fields", "\r\n", true, http.Header{}},
		{"folded", "A: 1\r\n 2\r\n\r\n", false, http.Header{"A": {"1 2"}}},
		{"folding refused", "A: 1\r\n 2\r\n\r\n", true, nil},
		{"fold without a field", " 2\r\n\r\n", false, nil},
		{"space before colon", "A : 1\r\n\r\n", true, nil},
		{"no colon", "A 1\r\n\r\n", true, nil},
		{"empty name", ": 1\r\n\r\n", true, nil},
		{"separator in name", "A/B: 1\r\n\r\n", true, nil},
		{"NUL in value", "A: x\x00y\r\n\r\n", true, nil},
		{"DEL in value", "A: x\x7fy\r\n\r\n", true, nil},
		{"bare CR in value", "A: x\ry\r\n\r\n", true, nil},
		{"tab in value", "A: x\ty\r\n\r\n", true, http.Header{"A": {"x\ty"}}},
		{"obs-text in value", "A: caf\xc3\xa9\r\n\r\n", true, http.Header{"A": {"caf\xc3\xa9"}}},
		{"no end", "A: 1\r\n", true, nil},
		{"last line without its end", "A: 1", true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			block := []byte(tc.block)
			fields, err := ScanFields(block, 0, nil, errTest, tc.noFold)
			if tc.want == nil {
				if !errors.Is(err, errTest) {
					t.Fatalf("ScanFields(%q) = %v, %v; want an error wrapping malformed", tc.block, fields, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ScanFields(%q): %v", tc.block, err)
			}
			h, _ := BuildHeader(nil, nil, string(block), block, fields, Keys("Host"))
			if diff := cmp.Diff(tc.want, h); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseContentLength(t *testing.T) {
	tests := []struct {
		vs      []string
		want    int64
		wantErr bool
	}{
		{nil, -1, false},
		{[]string{"0"}, 0, false},
		{[]string{"42"}, 42, false},
		{[]string{"007"}, 7, false},
		{[]string{"42", "42"}, 42, false},
		{[]string{"9223372036854775807"}, 1<<63 - 1, false},
		{[]string{"42", "43"}, 0, true},
		{[]string{""}, 0, true},
		{[]string{"-1"}, 0, true},
		{[]string{"+1"}, 0, true},
		{[]string{" 1"}, 0, true},
		{[]string{"1 "}, 0, true},
		{[]string{"0x10"}, 0, true},
		{[]string{"1_000"}, 0, true},
		{[]string{"1, 1"}, 0, true},
		{[]string{"9223372036854775808"}, 0, true},
	}
	for _, tc := range tests {
		got, err := ParseContentLength(tc.vs, errTest)
		if tc.wantErr {
			if !errors.Is(err, errTest) {
				t.Errorf("ParseContentLength(%q) = %d, %v; want an error wrapping malformed", tc.vs, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseContentLength(%q) = %d, %v; want %d", tc.vs, got, err, tc.want)
		}
	}
}

// TestReadBlock reads heads through small buffers and one-byte reads, so
// that heads span buffer fills and outgrow the buffer.
func TestReadBlock(t *testing.T) {
	errTooLarge := errors.New("too large")
	long := "GET /" + strings.Repeat("a", 100) + " HTTP/1.1\r\nHost: h\r\n\r\n"
	tests := []struct {
		name    string
		in      string
		limit   int
		want    string // the head; "" with err
		wantErr error
	}{
		{"fits", "A: 1\r\n\r\nrest", 100, "A: 1\r\n\r\n", nil},
		{"larger than the buffer", long + "rest", 1000, long, nil},
		{"at the limit", long, len(long), long, nil},
		{"over the limit", long, len(long) - 1, "", errTooLarge},
		{"over the limit within the buffer", "A: 1\r\n\r\n", 5, "", errTooLarge},
		{"closed within the head", "A: 1\r\n", 100, "", io.ErrUnexpectedEOF},
		{"closed before it", "", 100, "", io.EOF},
	}
	for _, tc := range tests {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			br := bufio.NewReaderSize(r, 16)
			got, err := ReadBlock(br, tc.limit, errTooLarge, "test head")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("%s (one byte %v): %q, %v; want %v", tc.name, oneByte, got, err, tc.wantErr)
				}
				continue
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("%s (one byte %v): %q, %v; want %q", tc.name, oneByte, got, err, tc.want)
				continue
			}
			// What follows the head is left in the reader.
			rest, _ := io.ReadAll(br)
			if want := strings.TrimPrefix(tc.in, tc.want); string(rest) != want {
				t.Errorf("%s (one byte %v): left %q, want %q", tc.name, oneByte, rest, want)
			}
		}
	}
}

func TestParseTrailer(t *testing.T) {
	h, err := ParseTrailer([]byte("x-sum: 1\r\nX-Sum: 2\r\n\r\n"), errTest)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(http.Header{"X-Sum": {"1", "2"}}, h); diff != "" {
		t.Errorf("trailer (-want +got):\n%s", diff)
	}
	if h, err := ParseTrailer([]byte("\r\n"), errTest); h != nil || err != nil {
		t.Errorf("empty trailer: %v, %v", h, err)
	}
	if _, err := ParseTrailer([]byte("bad line\r\n\r\n"), errTest); !errors.Is(err, errTest) {
		t.Errorf("bad trailer: %v", err)
	}
}
