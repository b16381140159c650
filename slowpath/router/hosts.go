package router

import (
	"errors"
	"slices"
	"strings"
)

// normalizeHostname lowers a configured hostname, drops one trailing dot and
// checks it is a DNS name, optionally with a leading "*." wildcard label.
func normalizeHostname(h string) (string, error) {
	h = asciiLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", errors.New("empty hostname")
	}
	if len(h) > 253 {
		return "", errors.New("hostname longer than 253 characters")
	}
	name := h
	if strings.HasPrefix(h, "*.") {
		name = h[2:]
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "", errors.New("hostname has an empty label")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				if c == '*' {
					return "", errors.New(`a wildcard must be the whole first label ("*.example.com")`)
				}
				return "", errors.New("hostname has a character outside letters, digits, '-' and '_'")
			}
		}
	}
	return h, nil
}

func isWildcard(h string) bool { return strings.HasPrefix(h, "*.") }

// wildcardMatch reports whether the wildcard pattern "*.suffix" covers name,
// which must have at least one label before ".suffix".
func wildcardMatch(pattern, name string) bool {
	suffix := pattern[1:] // ".suffix"
	return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
}

// intersectHostname returns the hostname pattern that accepts exactly the
// names both a and b accept (the narrower of the two), if they intersect.
func intersectHostname(a, b string) (string, bool) {
	aw, bw := isWildcard(a), isWildcard(b)
	switch {
	case !aw && !bw:
		return a, a == b
	case aw && !bw:
		return b, wildcardMatch(a, b)
	case !aw && bw:
		return a, wildcardMatch(b, a)
	}
	// Both wildcards: the one whose suffix ends with the other's suffix is
	// the narrower (or they are equal).
	switch {
	case strings.HasSuffix(a[1:], b[1:]):
		return a, true
	case strings.HasSuffix(b[1:], a[1:]):
		return b, true
	}
	return "", false
}

// anyHost is the effective hostnames of a route that accepts every host.
var anyHost = []string{""}

// effectiveHostnames returns the hostnames a route serves on a listener,
// sorted and without duplicates; [""] means any host, nil means none. The
// listener's hostnames must be sorted and without duplicates; the route's
// are sorted in place. The result may share either and must not be
// modified.
func effectiveHostnames(listener, route []string) []string {
	switch {
	case len(listener) == 0 && len(route) == 0:
		return anyHost
	case len(route) == 0:
		return listener
	case len(listener) == 0:
		return dedupe(route)
	}
	var out []string
	for _, r := range route {
		for _, l := range listener {
			if h, ok := intersectHostname(r, l); ok {
				out = append(out, h)
			}
		}
	}
	return dedupe(out)
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// requestHost returns the host of a request as Match compares it: port
// removed, one trailing dot removed, ASCII letters lowered.
func requestHost(host string) string {
	host = stripPort(host)
	host = strings.TrimSuffix(host, ".")
	return asciiLower(host)
}

// stripPort removes ":port" from a Host value; the colons of a bracketed
// IPv6 literal are not a port separator.
func stripPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i:], ']') >= 0 {
		return host
	}
	return host[:i]
}

// asciiLower lowers ASCII letters, allocating only when s has an upper-case
// one (hostnames are ASCII; IDNs arrive in punycode).
func asciiLower(s string) string {
	i := 0
	for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if c := b[i]; c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
