package httphead

import (
	"net/url"
	"strings"
)

// ParseOriginForm fills u from an origin-form request target (an absolute
// path and an optional query), exactly as url.ParseRequestURI would but
// without allocating, when the path holds only characters it keeps as
// they are (no percent-escapes, nothing url would escape, so RawPath stays
// empty) and the query no control character or '#'. Otherwise it returns
// false and leaves u alone: the caller parses with url.ParseRequestURI.
// Nearly every request's target takes the short way; a path such as
// "/a!b" must not, or a proxy would forward it re-escaped ("/a%21b").
func ParseOriginForm(u *url.URL, target string) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if !keptInPath[path[i]] {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < 0x20 || c == 0x7f || c == '#' {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// keptInPath is the bytes net/url leaves unescaped in a path: letters,
// digits, "-._~" and "$&+,/:;=@".
var keptInPath = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()
