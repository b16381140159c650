package lb

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestHashKey(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.7")
	v4mapped := netip.MustParseAddr("::ffff:192.0.2.7")
	v6 := netip.MustParseAddr("2001:db8::1")
	ipKey := func(a netip.Addr) uint64 {
		k, ok := HashKey(httptest.NewRequest(http.MethodGet, "/", nil), &pb.HashPolicy{SourceIp: true}, a)
		if !ok {
			t.Fatalf("no key for %s", a)
		}
		return k
	}
	tests := []struct {
		name    string
		policy  *pb.HashPolicy
		headers map[string][]string
		remote  netip.Addr
		want    uint64
		wantOK  bool
	}{
		{"header", &pb.HashPolicy{Header: "X-User"}, map[string][]string{"X-User": {"alice"}}, v4, HashString("alice"), true},
		{"header name is case-insensitive", &pb.HashPolicy{Header: "x-user"}, map[string][]string{"X-User": {"alice"}}, v4, HashString("alice"), true},
		{"header first value", &pb.HashPolicy{Header: "X-User"}, map[string][]string{"X-User": {"bob", "alice"}}, v4, HashString("bob"), true},
		{"header absent", &pb.HashPolicy{Header: "X-User"}, nil, v4, 0, false},
		{"header empty", &pb.HashPolicy{Header: "X-User"}, map[string][]string{"X-User": {""}}, v4, 0, false},
		{"cookie", &pb.HashPolicy{Cookie: "aff"}, map[string][]string{"Cookie": {"x=1; aff=abc123"}}, v4, HashString("abc123"), true},
		{"cookie absent", &pb.HashPolicy{Cookie: "aff"}, map[string][]string{"Cookie": {"x=1"}}, v4, 0, false},
		{"cookie empty", &pb.HashPolicy{Cookie: "aff"}, map[string][]string{"Cookie": {"aff="}}, v4, 0, false},
		{"source ip", &pb.HashPolicy{SourceIp: true}, nil, v4, ipKey(v4), true},
		{"source ip v6", &pb.HashPolicy{SourceIp: true}, nil, v6, ipKey(v6), true},
		{"source ip mapped v4 is v4", &pb.HashPolicy{SourceIp: true}, nil, v4mapped, ipKey(v4), true},
		{"source ip invalid", &pb.HashPolicy{SourceIp: true}, nil, netip.Addr{}, 0, false},
		{"nil policy hashes the source ip", nil, nil, v4, ipKey(v4), true},
		{"empty policy hashes the source ip", &pb.HashPolicy{}, nil, v4, ipKey(v4), true},
		{"header before cookie", &pb.HashPolicy{Header: "X-User", Cookie: "aff"}, map[string][]string{"X-User": {"alice"}, "Cookie": {"aff=abc"}}, v4, HashString("alice"), true},
		{"cookie when header absent", &pb.HashPolicy{Header: "X-User", Cookie: "aff"}, map[string][]string{"Cookie": {"aff=abc"}}, v4, HashString("abc"), true},
		{"source ip when header and cookie absent", &pb.HashPolicy{Header: "X-User", Cookie: "aff", SourceIp: true}, nil, v4, ipKey(v4), true},
		{"cookie before source ip", &pb.HashPolicy{Cookie: "aff", SourceIp: true}, map[string][]string{"Cookie": {"aff=abc"}}, v4, HashString("abc"), true},
		{"no source ip without the flag", &pb.HashPolicy{Header: "X-User"}, nil, v4, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for k, vs := range tc.headers {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got, ok := HashKey(r, tc.policy, tc.remote)
			if ok != tc.wantOK || got != tc.want {
				t.Fatalf("HashKey = %#x, %v; want %#x, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if ipKey(v4) == ipKey(v6) {
		t.Fatal("different addresses hash alike")
	}
}

func TestNewCookieValue(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		v := NewCookieValue()
		b, err := hex.DecodeString(v)
		if err != nil || len(b) != 16 {
			t.Fatalf("cookie value %q is not 16 hex-encoded bytes", v)
		}
		if seen[v] {
			t.Fatalf("cookie value %q repeated", v)
		}
		seen[v] = true
	}
}
