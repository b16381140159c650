package lb

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"

	"github.com/cespare/xxhash/v2"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// HashString is the hash of affinity keys (xxhash64). It is the same on
// every node, so a key maps to the same endpoint whichever proxy serves it.
func HashString(s string) uint64 { return xxhash.Sum64String(s) }

// HashKey computes the affinity key of r for p, for RingHash and Maglev.
// The sources are tried in order, the first that yields a key wins:
//
//  1. p.Header: the header's first value; absent or empty gives no key.
//  2. p.Cookie: the cookie's value; absent or empty gives no key. The proxy
//     then creates the cookie with NewCookieValue and picks with
//     HashString of that value, so later requests carrying it stick.
//  3. p.SourceIp: remote, the client's address (IPv4-mapped IPv6 hashes as
//     IPv4, zones are ignored); an invalid address gives no key.
//
// A nil p, or one with no source set, hashes the source IP: the
// ProxyBackend's documented default. ok is false when no key applies; the
// balancer then picks like Random. Empty values give no key so that they
// do not pile every such request onto one endpoint.
func HashKey(r *http.Request, p *pb.HashPolicy, remote netip.Addr) (key uint64, ok bool) {
	header, cookie, source := p.GetHeader(), p.GetCookie(), p.GetSourceIp()
	if header == "" && cookie == "" {
		source = true
	}
	if header != "" {
		if v := r.Header.Values(header); len(v) > 0 && v[0] != "" {
			return HashString(v[0]), true
		}
	}
	if cookie != "" {
		if c, err := r.Cookie(cookie); err == nil && c.Value != "" {
			return HashString(c.Value), true
		}
	}
	if source && remote.IsValid() {
		b := remote.Unmap().WithZone("").As16()
		return xxhash.Sum64(b[:]), true
	}
	return 0, false
}

// NewCookieValue returns a random affinity cookie value: 16 bytes from
// crypto/rand, hex-encoded (32 characters).
func NewCookieValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead
	return hex.EncodeToString(b[:])
}
