package h1

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// testCert makes a certificate for "h1.test" and the pool that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ca, err := testcert.NewCA("h1 test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Leaf("h1.test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, ca.Pool()
}

// TestTLS serves handshaken TLS connections: Request.TLS is set,
// keep-alive and pipelining work, and a refused request's answer arrives
// before the close. Over plain TCP the records that end responses are
// written in bursts (wbatch.Conn under the TLS connection); over the
// counting wrapper they are written directly.
func TestTLS(t *testing.T) {
	for _, counting := range []bool{true, false} {
		name := "plain TCP"
		if counting {
			name = "counted conn"
		}
		t.Run(name, func(t *testing.T) { testTLS(t, counting) })
	}
}

func testTLS(t *testing.T, counting bool) {
	cert, pool := testCert(t)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || !r.TLS.HandshakeComplete || r.TLS.ServerName != "h1.test" {
			http.Error(w, "no TLS state", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "tls:"+r.URL.Path)
	})}
	ts := serveConns(t, srv, func(c net.Conn) net.Conn {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
		_ = tc.SetDeadline(time.Now().Add(testDeadline))
		if err := tc.Handshake(); err != nil {
			return nil
		}
		_ = tc.SetDeadline(time.Time{})
		return tc
	}, counting)

	dialTLS := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pool, ServerName: "h1.test", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(testDeadline))
		return c, bufio.NewReader(c)
	}
	c, br := dialTLS()
	for _, path := range []string{"/a", "/b"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h1.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "tls:"+path || resp.Close {
			t.Fatalf("%s: %d %q close=%v", path, resp.StatusCode, b, resp.Close)
		}
	}

	c, br = dialTLS()
	var pipelined strings.Builder
	for i := range 10 {
		fmt.Fprintf(&pipelined, "GET /p%d HTTP/1.1\r\nHost: h1.test\r\n\r\n", i)
	}
	if _, err := io.WriteString(c, pipelined.String()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := fmt.Sprintf("tls:/p%d", i); string(b) != want {
			t.Fatalf("pipelined %d: %q, want %q", i, b, want)
		}
	}

	c, br = dialTLS()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("request without Host: %v, %v; want 400", resp, err)
	}
	_, _ = io.ReadAll(resp.Body)
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after 400: %v, want EOF", err)
	}
}
