package compress

import (
	"strings"
	"testing"
)

func TestNegotiate(t *testing.T) {
	brGzip := []algorithm{algBrotli, algGzip}
	gzipBr := []algorithm{algGzip, algBrotli}
	all := []algorithm{algZstd, algBrotli, algGzip}
	tests := []struct {
		name   string
		values []string // nil: no Accept-Encoding header
		prefs  []algorithm
		want   string // "" for identity
	}{
		{"no header", nil, brGzip, ""},
		{"empty header", []string{""}, brGzip, ""},
		{"gzip only", []string{"gzip"}, brGzip, "gzip"},
		{"x-gzip alias", []string{"x-gzip"}, brGzip, "gzip"},
		{"case-insensitive coding", []string{"GZip, BR"}, brGzip, "br"},
		{"server preference breaks ties", []string{"gzip, br"}, brGzip, "br"},
		{"server preference breaks ties other order", []string{"br, gzip"}, gzipBr, "gzip"},
		{"browser default", []string{"gzip, deflate, br, zstd"}, all, "zstd"},
		{"higher q wins over preference", []string{"br;q=0.5, gzip;q=0.8"}, brGzip, "gzip"},
		{"q=0 refuses", []string{"br;q=0, gzip"}, brGzip, "gzip"},
		{"q=0.000 refuses", []string{"gzip;q=0.000"}, brGzip, ""},
		{"all refused", []string{"br;q=0, gzip;q=0"}, brGzip, ""},
		{"unknown codings only", []string{"deflate, compress, sdch"}, brGzip, ""},
		{"unconfigured coding ignored", []string{"zstd"}, brGzip, ""},
		{"wildcard", []string{"*"}, brGzip, "br"},
		{"wildcard with refusal", []string{"*, br;q=0"}, brGzip, "gzip"},
		{"wildcard refused but coding listed", []string{"*;q=0, gzip"}, brGzip, "gzip"},
		{"wildcard lower than listed", []string{"*;q=0.1, gzip;q=0.5"}, brGzip, "gzip"},
		{"wildcard higher than listed", []string{"*;q=0.9, gzip;q=0.5"}, brGzip, "br"},
		{"identity preferred", []string{"gzip;q=0.5, identity"}, brGzip, ""},
		{"identity equal keeps coding", []string{"gzip, identity"}, brGzip, "gzip"},
		{"identity refused, coding accepted", []string{"identity;q=0, gzip"}, brGzip, "gzip"},
		{"identity refused, nothing else", []string{"identity;q=0"}, brGzip, ""},
		{"whitespace and tabs", []string{" gzip ;\tq=0.5 , br ; q = 0.6 "}, gzipBr, "br"},
		{"uppercase Q", []string{"br;Q=0.1, gzip;Q=0.2"}, brGzip, "gzip"},
		{"extra parameter ignored", []string{"gzip;level=9;q=0.4, br;q=0.3"}, brGzip, "gzip"},
		{"first q counts", []string{"br;q=0;q=1, gzip"}, brGzip, "gzip"},
		{"first occurrence counts", []string{"br;q=0, br, gzip;q=0.1"}, brGzip, "gzip"},
		{"several header lines", []string{"deflate", "gzip;q=0.2", "br;q=0.1"}, brGzip, "gzip"},
		{"invalid q ignored", []string{"br;q=2, gzip;q=0.5"}, brGzip, "gzip"},
		{"too many decimals ignored", []string{"br;q=0.5555, gzip;q=0.1"}, brGzip, "gzip"},
		{"q=1.000 valid", []string{"br;q=1.000, gzip"}, gzipBr, "gzip"},
		{"q=1.001 invalid", []string{"br;q=1.001"}, brGzip, ""},
		{"q=0. valid", []string{"gzip;q=0., br;q=0.001"}, brGzip, "br"},
		{"empty elements", []string{",, ,gzip,,"}, brGzip, "gzip"},
		{"malformed element ignored", []string{"gz ip, br;q, gzip;=1, \"br\""}, brGzip, ""},
		{"lone parameter ignored", []string{";q=1"}, brGzip, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acc := parseAcceptEncoding(tc.values)
			a, ok := acc.choose(tc.prefs)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("Accept-Encoding %q with preference %v: got %q, want %q", tc.values, tc.prefs, got, tc.want)
			}
		})
	}
}

func TestParseQValue(t *testing.T) {
	tests := []struct {
		in   string
		want int16
		ok   bool
	}{
		{"0", 0, true}, {"1", 1000, true}, {"0.5", 500, true}, {"0.05", 50, true},
		{"0.005", 5, true}, {"0.999", 999, true}, {"1.0", 1000, true}, {"1.", 1000, true},
		{"", 0, false}, {"2", 0, false}, {".5", 0, false}, {"0.5.", 0, false},
		{"1.1", 0, false}, {"0,5", 0, false}, {"00", 0, false}, {"0.1234", 0, false}, {"-0", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseQValue(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseQValue(%q) = %d, %t; want %d, %t", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// referenceAccept is a plain, allocating implementation of the grammar that
// parseAcceptEncoding documents, for differential fuzzing.
func referenceAccept(values []string) acceptance {
	acc := acceptance{star: notListed, identity: notListed}
	for i := range acc.q {
		acc.q[i] = notListed
	}
	isToken := func(s string) bool {
		if s == "" {
			return false
		}
		for _, c := range []byte(s) {
			alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
			if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
				return false
			}
		}
		return true
	}
	trim := func(s string) string { return strings.Trim(s, " \t") }
	for _, v := range values {
		for _, elem := range strings.Split(v, ",") {
			parts := strings.Split(elem, ";")
			coding := trim(parts[0])
			if !isToken(coding) {
				continue
			}
			q, valid, sawQ := int16(1000), true, false
			for _, p := range parts[1:] {
				name, value, found := strings.Cut(p, "=")
				name, value = trim(name), trim(value)
				if !found || !isToken(name) || !isToken(value) {
					valid = false
					break
				}
				if !sawQ && strings.EqualFold(name, "q") {
					sawQ = true
					// The grammar in words: "0" or "1", optionally "." and
					// up to three digits, at most 1.000.
					ok := len(value) >= 1 && len(value) <= 5 && (value[0] == '0' || value[0] == '1') &&
						(len(value) == 1 || value[1] == '.')
					n := 0
					if ok {
						n = int(value[0]-'0') * 1000
						digits := ""
						if len(value) > 2 {
							digits = value[2:]
						}
						for len(digits) < 3 {
							digits += "0"
						}
						for i, c := range []byte(digits) {
							if c < '0' || c > '9' {
								ok = false
								break
							}
							n += int(c-'0') * []int{100, 10, 1}[i]
						}
					}
					if !ok || n > 1000 {
						valid = false
						break
					}
					q = int16(n)
				}
			}
			if !valid {
				continue
			}
			var slot *int16
			switch lc := strings.ToLower(coding); lc {
			case "*":
				slot = &acc.star
			case "identity":
				slot = &acc.identity
			case "gzip", "x-gzip":
				slot = &acc.q[algGzip]
			case "br":
				slot = &acc.q[algBrotli]
			case "zstd":
				slot = &acc.q[algZstd]
			default:
				continue
			}
			if *slot == notListed {
				*slot = q
			}
		}
	}
	return acc
}

func FuzzParseAcceptEncoding(f *testing.F) {
	for _, s := range []string{
		"", "gzip", "gzip, deflate, br, zstd", "br;q=0.5, gzip;q=0.8", "*;q=0, identity",
		" gzip ;\tq=0.5 , br ; q = 0.6 ", "x-gzip;q=1.000", "br;q=0;q=1", "gz ip, br;q, \"br\"",
		"gzip;q=0.5555", "identity;q=0", "zstd;Q=0.1,,", "\x00;q=1", "gzip;q=\xff",
	} {
		f.Add(s, "deflate;q=0.9")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		values := []string{a, b}
		got := parseAcceptEncoding(values)
		if want := referenceAccept(values); got != want {
			t.Fatalf("parseAcceptEncoding(%q) = %+v, reference says %+v", values, got, want)
		}
		for _, q := range append(got.q[:], got.star, got.identity) {
			if q != notListed && (q < 0 || q > 1000) {
				t.Fatalf("weight %d out of range for %q", q, values)
			}
		}
		prefs := []algorithm{algBrotli, algGzip, algZstd}
		alg, ok := got.choose(prefs)
		if !ok {
			return
		}
		q := got.q[alg]
		if q == notListed {
			q = got.star
		}
		if q <= 0 {
			t.Fatalf("chose %v with weight %d for %q", alg, q, values)
		}
		for _, other := range prefs {
			oq := got.q[other]
			if oq == notListed {
				oq = got.star
			}
			if oq > q {
				t.Fatalf("chose %v (q %d) over %v (q %d) for %q", alg, q, other, oq, values)
			}
		}
	})
}
