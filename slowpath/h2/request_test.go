package h2

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2/hpack"
)

func fields(kv ...string) []hpack.HeaderField {
	var f []hpack.HeaderField
	for i := 0; i+1 < len(kv); i += 2 {
		f = append(f, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return f
}

// TestParseRequest: RFC 9113 §8.2.2 and §8.3.1 rules for request header
// blocks, and how valid ones map to fields.
func TestParseRequest(t *testing.T) {
	get := []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/p"}
	with := func(extra ...string) []string { return append(append([]string{}, get...), extra...) }
	for _, tc := range []struct {
		name   string
		kv     []string
		end    bool
		err    error // nil: valid
		header http.Header
		cl     int64
	}{
		{name: "plain GET", kv: get, end: true, header: http.Header{}, cl: -1},
		{name: "cookies joined", kv: with("cookie", "a=1", "x-y", "z", "cookie", "b=2"), end: true,
			header: http.Header{"Cookie": {"a=1; b=2"}, "X-Y": {"z"}}, cl: -1},
		{name: "repeated field keeps both", kv: with("accept", "a", "accept", "b"), end: true,
			header: http.Header{"Accept": {"a", "b"}}, cl: -1},
		{name: "te trailers", kv: with("te", "trailers"), end: true, header: http.Header{"Te": {"trailers"}}, cl: -1},
		{name: "content-length with body", kv: with("content-length", "5"), header: http.Header{"Content-Length": {"5"}}, cl: 5},
		{name: "content-length 0 and END_STREAM", kv: with("content-length", "0"), end: true, header: http.Header{"Content-Length": {"0"}}, cl: 0},
		{name: "CONNECT", kv: []string{":method", "CONNECT", ":authority", "b.test:443"}, header: http.Header{}, cl: -1},
		{name: "OPTIONS *", kv: []string{":method", "OPTIONS", ":scheme", "https", ":path", "*"}, end: true, header: http.Header{}, cl: -1},

		{name: "no method", kv: []string{":scheme", "https", ":path", "/"}, err: errMissingPseudo},
		{name: "no scheme", kv: []string{":method", "GET", ":path", "/"}, err: errMissingPseudo},
		{name: "no path", kv: []string{":method", "GET", ":scheme", "https"}, err: errMissingPseudo},
		{name: "empty path", kv: []string{":method", "GET", ":scheme", "https", ":path", ""}, err: errEmptyPath},
		{name: "relative path", kv: []string{":method", "GET", ":scheme", "https", ":path", "p"}, err: errBadPath},
		{name: "CONNECT with path", kv: []string{":method", "CONNECT", ":authority", "b.test:443", ":path", "/"}, err: errConnectPseudo},
		{name: "CONNECT without authority", kv: []string{":method", "CONNECT"}, err: errConnectPseudo},
		{name: ":protocol", kv: with(":protocol", "websocket"), err: errProtocolPseudo},
		{name: "connection", kv: with("connection", "close"), err: errConnHeader},
		{name: "keep-alive", kv: with("keep-alive", "1"), err: errConnHeader},
		{name: "proxy-connection", kv: with("proxy-connection", "x"), err: errConnHeader},
		{name: "transfer-encoding", kv: with("transfer-encoding", "chunked"), err: errConnHeader},
		{name: "upgrade", kv: with("upgrade", "h2c"), err: errConnHeader},
		{name: "te gzip", kv: with("te", "gzip"), err: errTE},
		{name: "content-length not a number", kv: with("content-length", "x"), err: errContentLength},
		{name: "content-length signed", kv: with("content-length", "+1"), err: errContentLength},
		{name: "content-length twice differing", kv: with("content-length", "1", "content-length", "2"), err: errContentLength},
		{name: "content-length with END_STREAM", kv: with("content-length", "3"), end: true, err: errLengthMismatch},
		{name: "bad authority", kv: []string{":method", "GET", ":scheme", "https", ":authority", "a b", ":path", "/"}, err: errInvalidAuthority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := parseRequest(fields(tc.kv...), tc.end, nil, nil)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("valid request rejected: %v", err)
			}
			if d := cmp.Diff(tc.header, rf.header); d != "" {
				t.Errorf("header (-want +got):\n%s", d)
			}
			if rf.contentLength != tc.cl {
				t.Errorf("content length %d, want %d", rf.contentLength, tc.cl)
			}
		})
	}
}

// TestResponseFieldName: header map keys become lower-case wire names;
// connection-specific fields and invalid names are not sent.
func TestResponseFieldName(t *testing.T) {
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"Content-Type", "content-type", true},
		{"X-Custom-Thing", "x-custom-thing", true},
		{"Connection", "", false},
		{"Transfer-Encoding", "", false},
		{"Keep-Alive", "", false},
		{"Upgrade", "", false},
		{"Te", "", false},
		{"Bad Name", "", false},
		{http.TrailerPrefix + "X", "", false},
	} {
		got, ok := responseFieldName(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("responseFieldName(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}
