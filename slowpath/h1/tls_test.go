package h1

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// testCert makes a self-signed certificate for "h1.test".
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "h1.test"},
		DNSNames:     []string{"h1.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestTLS serves handshaken TLS connections: Request.TLS is set,
// keep-alive works, and a refused request's answer arrives before the
// close.
func TestTLS(t *testing.T) {
	cert, pool := testCert(t)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || !r.TLS.HandshakeComplete || r.TLS.ServerName != "h1.test" {
			http.Error(w, "no TLS state", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "tls:"+r.URL.Path)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
				_ = tc.SetDeadline(time.Now().Add(testDeadline))
				if err := tc.Handshake(); err != nil {
					_ = c.Close()
					return
				}
				_ = tc.SetDeadline(time.Time{})
				srv.ServeConn(tc)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); _ = srv.Close(); wg.Wait() })

	dialTLS := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "h1.test", NextProtos: []string{"http/1.1"}})
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
