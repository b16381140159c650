package h2

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/novaedge/novaedge/slowpath/internal/h2spec"
)

// h2specHandler reads the request body, then answers with a body longer
// than one byte (the flow-control cases expect DATA frames).
func h2specHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "hello from the h2 package's test server\n")
}

// TestH2spec runs h2spec --strict (every case, SHOULDs included) against
// ServeConn with no filter in front, over h2c with prior knowledge and
// over TLS with ALPN h2; every case must pass.
func TestH2spec(t *testing.T) {
	bin, err := h2spec.Bin()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{
		{"h2c-prior-knowledge", false},
		{"h2-tls-alpn", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, tc.tls, http.HandlerFunc(h2specHandler), nil)
			_, p, _ := net.SplitHostPort(ts.addr)
			port, _ := strconv.Atoi(p)
			res, out, err := h2spec.Run(t.Context(), bin, port, tc.tls, t.TempDir())
			if err != nil {
				t.Fatalf("%v\nh2spec output:\n%s", err, out)
			}
			t.Logf("h2spec --strict %s: %d cases, %d passed, %d failed, %d skipped", tc.name, res.Total, res.Passed(), len(res.Failed), len(res.Skipped))
			if p := res.Problems(); p != "" {
				t.Errorf("h2spec --strict: %s", p)
			}
		})
	}
}
