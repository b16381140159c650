package compress

import "strings"

// algorithm is a content coding this package can produce.
type algorithm uint8

const (
	algGzip algorithm = iota
	algBrotli
	algZstd
	numAlgorithms
)

// algorithmNames are the Content-Encoding tokens, indexed by algorithm.
var algorithmNames = [numAlgorithms]string{algGzip: Gzip, algBrotli: Brotli, algZstd: Zstd}

func (a algorithm) String() string { return algorithmNames[a] }

// algorithmByName looks a configured algorithm name up, case-insensitively.
func algorithmByName(s string) (algorithm, bool) {
	for a, n := range algorithmNames {
		if strings.EqualFold(s, n) {
			return algorithm(a), true
		}
	}
	return 0, false
}

// notListed marks a coding that an Accept-Encoding header does not mention.
const notListed = -1

// acceptance is what an Accept-Encoding header says about the codings this
// package cares about: a weight in thousandths (0..1000) or notListed.
type acceptance struct {
	q        [numAlgorithms]int16
	star     int16
	identity int16
}

// parseAcceptEncoding reads the Accept-Encoding field values (RFC 9110
// section 12.5.3). Each element is a coding token followed by parameters;
// the first "q" parameter is its weight (default 1). An element that is not
// well formed, or whose weight is not a valid qvalue, is ignored, and when a
// coding is listed twice its first element counts. "x-gzip" means gzip.
// Whitespace is allowed around ";" and "=" (leniently, beyond the RFC).
//
// It does not allocate: it runs for every request.
func parseAcceptEncoding(values []string) acceptance {
	acc := acceptance{star: notListed, identity: notListed}
	for i := range acc.q {
		acc.q[i] = notListed
	}
	for _, v := range values {
		for len(v) > 0 {
			var elem string
			if i := strings.IndexByte(v, ','); i >= 0 {
				elem, v = v[:i], v[i+1:]
			} else {
				elem, v = v, ""
			}
			coding, q, ok := parseElement(elem)
			if !ok {
				continue
			}
			var slot *int16
			switch {
			case coding == "*":
				slot = &acc.star
			case strings.EqualFold(coding, "identity"):
				slot = &acc.identity
			case strings.EqualFold(coding, "x-gzip"):
				slot = &acc.q[algGzip]
			default:
				a, known := algorithmByName(coding)
				if !known {
					continue
				}
				slot = &acc.q[a]
			}
			if *slot == notListed {
				*slot = q
			}
		}
	}
	return acc
}

// parseElement parses one comma-free element: OWS token OWS *( ";" OWS name
// OWS "=" OWS value OWS ). ok is false for an empty or malformed element.
func parseElement(s string) (coding string, q int16, ok bool) {
	s = trimOWS(s)
	n := tokenLen(s)
	if n == 0 {
		return "", 0, false
	}
	coding, s = s[:n], trimOWS(s[n:])
	q = 1000
	sawQ := false
	for len(s) > 0 {
		if s[0] != ';' {
			return "", 0, false
		}
		s = trimOWS(s[1:])
		n = tokenLen(s)
		if n == 0 {
			return "", 0, false
		}
		name := s[:n]
		s = trimOWS(s[n:])
		if len(s) == 0 || s[0] != '=' {
			return "", 0, false
		}
		s = trimOWS(s[1:])
		n = tokenLen(s)
		if n == 0 {
			return "", 0, false
		}
		value := s[:n]
		s = trimOWS(s[n:])
		if !sawQ && (name == "q" || name == "Q") {
			sawQ = true
			if q, ok = parseQValue(value); !ok {
				return "", 0, false
			}
		}
	}
	return coding, q, true
}

// parseQValue parses RFC 9110's qvalue ("0", "0.5", "1.000", at most three
// decimals, at most 1) into thousandths.
func parseQValue(s string) (int16, bool) {
	if len(s) == 0 || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	v := int16(s[0]-'0') * 1000
	if len(s) == 1 {
		return v, true
	}
	if s[1] != '.' {
		return 0, false
	}
	scale := int16(100)
	for i := 2; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v += int16(c-'0') * scale
		scale /= 10
	}
	if v > 1000 {
		return 0, false
	}
	return v, true
}

// trimOWS removes optional whitespace (SP and HTAB) from both ends.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tokenLen is the length of the RFC 9110 token at the start of s.
func tokenLen(s string) int {
	for i := 0; i < len(s); i++ {
		if !isTChar(s[i]) {
			return i
		}
	}
	return len(s)
}

func isTChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// choose picks the coding to use: among prefs (the server's order), the one
// with the highest weight above zero, earlier entries winning ties. A coding
// not listed takes the weight of "*" if that is listed. When the client
// lists identity with a higher weight than the best coding, it prefers the
// body as it is, and ok is false. ok is false too when nothing in prefs is
// acceptable.
func (acc *acceptance) choose(prefs []algorithm) (best algorithm, ok bool) {
	bestQ := int16(0)
	for _, a := range prefs {
		q := acc.q[a]
		if q == notListed {
			q = acc.star
		}
		if q > bestQ {
			best, bestQ = a, q
		}
	}
	if bestQ <= 0 || acc.identity > bestQ {
		return 0, false
	}
	return best, true
}
