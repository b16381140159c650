package httphead

import (
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseOriginForm: what ParseOriginForm fills is what
// url.ParseRequestURI makes of the same target, and targets it declines
// are the ones whose parse needs more (escapes, characters url escapes).
func TestParseOriginForm(t *testing.T) {
	for _, tc := range []struct {
		target string
		short  bool
	}{
		{"/", true},
		{"/index.html", true},
		{"/a/b?x=1&y=2", true},
		{"/a?", true},
		{"/a??", true},
		{"/a?b?c", true},
		{"//double/slash", true},
		{"/p:a@t;h=1,$+&~_-.", true},
		{"/q?a b=c d", true},
		{"/a%20b", false},
		{"/a!b", false},
		{"/a b", false},
		{"/a*b(c)'d", false},
		{"/a#frag", false},
		{"/a?b#c", false},
		{"/a\tb", false},
		{"/a?\x01", false},
		{"/\xc3\xa9", false},
		{"*", false},
		{"http://host/path", false},
		{"", false},
	} {
		var u url.URL
		got := ParseOriginForm(&u, tc.target)
		if got != tc.short {
			t.Errorf("ParseOriginForm(%q) = %v, want %v", tc.target, got, tc.short)
		}
		if got {
			checkSame(t, tc.target, &u)
		}
	}
}

// TestParseOriginFormRandom checks the same on random targets made of the
// characters that matter.
func TestParseOriginFormRandom(t *testing.T) {
	const alphabet = "/?#%!*() \t\x7faZ09-._~$&+,:;=@\xc3"
	r := rand.New(rand.NewPCG(1, 2))
	short := 0
	for range 20000 {
		b := []byte{'/'}
		for range r.IntN(12) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		var u url.URL
		if ParseOriginForm(&u, string(b)) {
			short++
			checkSame(t, string(b), &u)
		}
	}
	if short == 0 {
		t.Fatal("no random target took the short way")
	}
}

func checkSame(t *testing.T, target string, u *url.URL) {
	t.Helper()
	want, err := url.ParseRequestURI(target)
	if err != nil {
		t.Errorf("ParseOriginForm accepted %q, which url.ParseRequestURI rejects: %v", target, err)
		return
	}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("ParseOriginForm(%q) differs from url.ParseRequestURI (-want +got):\n%s", target, diff)
	}
	if u.RequestURI() != target {
		t.Errorf("%q comes back as %q", target, u.RequestURI())
	}
}
