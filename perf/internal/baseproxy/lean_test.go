package baseproxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestServeLean runs the lean proxy against a real backend over loopback: keep-alive
// requests on one connection, what the backend sees (forwarding fields
// added, X-Forwarded-For appended to, hop-by-hop fields dropped), what the
// client sees (the backend's hop-by-hop fields dropped), and the requests
// that end the connection.
func TestServeLean(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Seen", strings.Join([]string{
			r.URL.Path, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Forwarded"), r.Header.Get("X-Other"),
			r.Header.Get("Proxy-Authorization"), r.Header.Get("Te"),
		}, "|"))
		w.Header().Set("X-Request-Id-Seen", r.Header.Get("X-Request-Id"))
		_, _ = io.WriteString(w, "hello "+r.URL.Path)
	}))
	defer backend.Close()
	addr := start(t, ServeLean, backend.Listener.Addr().String())
	c := dial(t, addr)
	br := bufio.NewReader(c)
	ids := map[string]bool{}
	for _, tc := range []struct{ path, extra, seen string }{
		{"/a", "", "/a|127.0.0.1|x.test|http|for=127.0.0.1;host=\"x.test\";proto=http|||"},
		{"/b?q=1", "X-Forwarded-For: 10.0.0.1\r\nX-Other: yes\r\nProxy-Authorization: secret\r\nTE: trailers\r\nConnection: keep-alive\r\n",
			"/b|10.0.0.1, 127.0.0.1|x.test|http|for=127.0.0.1;host=\"x.test\";proto=http|yes||"},
	} {
		if _, err := io.WriteString(c, "GET "+tc.path+" HTTP/1.1\r\nHost: x.test\r\n"+tc.extra+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: read response: %v", tc.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		path, _, _ := strings.Cut(tc.path, "?")
		if got, want := string(body), "hello "+path; got != want {
			t.Errorf("%s: body %q, want %q", tc.path, got, want)
		}
		if got := resp.Header.Get("X-Seen"); got != tc.seen {
			t.Errorf("%s: the backend saw %q, want %q", tc.path, got, tc.seen)
		}
		if resp.Header.Get("Keep-Alive") != "" {
			t.Errorf("%s: the backend's Keep-Alive field reached the client", tc.path)
		}
		id := resp.Header.Get("X-Request-Id-Seen")
		if len(id) != 32 || ids[id] {
			t.Errorf("%s: request ID %q: want 32 hex digits, new each time", tc.path, id)
		}
		ids[id] = true
	}

	for name, req := range map[string]string{
		"body":          "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
		"no host":       "GET / HTTP/1.1\r\n\r\n",
		"bad name":      "GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",
		"absolute form": "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		ends(t, addr, name, req)
	}
}
