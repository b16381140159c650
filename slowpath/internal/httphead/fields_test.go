package httphead

import (
	"errors"
	"strings"
	"testing"
)

// scan returns a head's block and fields as ScanFields leaves them.
func scan(t *testing.T, lines ...string) ([]byte, []Field) {
	t.Helper()
	block := []byte("HTTP/1.1 200 OK\r\n" + strings.Join(lines, "\r\n") + "\r\n\r\n")
	fields, err := ScanFields(block, len("HTTP/1.1 200 OK\r\n"), nil, errors.New("malformed"), false)
	if err != nil {
		t.Fatal(err)
	}
	return block, fields
}

func TestContentLength(t *testing.T) {
	cases := []struct {
		lines []string
		want  int64
		err   bool
	}{
		{nil, -1, false},
		{[]string{"X-A: 1"}, -1, false},
		{[]string{"content-length: 0"}, 0, false},
		{[]string{"Content-Length:  42 "}, 42, false},
		{[]string{"Content-Length: 7", "X: y", "Content-Length: 7"}, 7, false},
		{[]string{"Content-Length: 9223372036854775807"}, 1<<63 - 1, false},
		{[]string{"Content-Length: 9223372036854775808"}, 0, true},
		{[]string{"Content-Length: 7", "Content-Length: 8"}, 0, true},
		{[]string{"Content-Length: -1"}, 0, true},
		{[]string{"Content-Length: +1"}, 0, true},
		{[]string{"Content-Length: 1 2"}, 0, true},
		{[]string{"Content-Length: 0x10"}, 0, true},
		{[]string{"Content-Length:"}, 0, true},
	}
	for _, tc := range cases {
		block, fields := scan(t, tc.lines...)
		n, err := ContentLength(block, fields, errors.New("malformed"))
		if (err != nil) != tc.err || err == nil && n != tc.want {
			t.Errorf("%q: %d, %v; want %d, error %v", tc.lines, n, err, tc.want, tc.err)
		}
	}
}

func TestTokens(t *testing.T) {
	block, fields := scan(t, "Connection: keep-alive,  X-Secret ", "connection: Close", "X-Secret: s", "Te: trailers;q=1")
	for _, tc := range []struct {
		name, token string
		want        bool
	}{
		{"Connection", "close", true},
		{"Connection", "keep-alive", true},
		{"Connection", "x-secret", true},
		{"Connection", "secret", false},
		{"Te", "trailers", false}, // a parameter makes it another item
		{"X-Secret", "s", true},
		{"Upgrade", "h2c", false},
	} {
		if got := FieldsHaveToken(block, fields, tc.name, tc.token); got != tc.want {
			t.Errorf("%s lists %q: %v, want %v", tc.name, tc.token, got, tc.want)
		}
	}
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"X-Secret", true},
		{"x-secret", true},
		{"Close", true},
		{"Keep-Alive", true},
		{"X-Other", false},
		{"Secret", false},
	} {
		if got := NamedByConnection(block, fields, []byte(tc.key)); got != tc.want {
			t.Errorf("Connection names %s: %v, want %v", tc.key, got, tc.want)
		}
	}
	if f := fields[2]; !f.Is(block, "X-Secret") || f.Is(block, "x-secret") || string(f.Value(block)) != "s" {
		t.Errorf("field 2: %q: %q", f.Name(block), f.Value(block))
	}
}
