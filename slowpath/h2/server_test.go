package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// testServer is a Server behind a loopback listener, h2c (prior
// knowledge) or TLS with ALPN h2.
type testServer struct {
	srv  *Server
	ln   net.Listener
	addr string
	tls  bool
	ca   *testcert.CA
	wg   sync.WaitGroup
}

// startServer serves h on 127.0.0.1; configure adjusts the Server before
// the first connection. Everything stops in t.Cleanup.
func startServer(t testing.TB, useTLS bool, h http.Handler, configure func(*Server)) *testServer {
	t.Helper()
	ts := &testServer{srv: &Server{Handler: h, Log: slog.New(slog.DiscardHandler)}, tls: useTLS}
	if configure != nil {
		configure(ts.srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.ln, ts.addr = ln, ln.Addr().String()
	var tcfg *tls.Config
	if useTLS {
		ca, err := testcert.NewCA("h2 test")
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := ca.Leaf("h2.test", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		ts.ca = ca
		tcfg = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	}
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				ts.serve(c, tcfg)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = ts.srv.Close()
		ts.wg.Wait()
	})
	return ts
}

func (ts *testServer) serve(c net.Conn, tcfg *tls.Config) {
	if tcfg == nil {
		ts.srv.ServeConn(c, ConnOptions{})
		return
	}
	tc := tls.Server(c, tcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = tc.Close()
		return
	}
	cs := tc.ConnectionState()
	ts.srv.ServeConn(tc, ConnOptions{TLS: &cs})
}

// client returns an x/net HTTP/2 client for ts: TLS with the test CA, or
// h2c by dialing plain TCP.
func (ts *testServer) client(t testing.TB) *http.Client {
	t.Helper()
	// x/net's Transport is deprecated in favour of net/http's, but it is
	// the HTTP/2 client the proxy's peers use and the one that exposes
	// stream errors (http2.StreamError) to the tests.
	tr := &http2.Transport{} //nolint:staticcheck // SA1019: see above
	if ts.tls {
		tr.TLSClientConfig = &tls.Config{RootCAs: ts.ca.Pool(), ServerName: "h2.test", NextProtos: []string{"h2"}} //nolint:staticcheck // SA1019: see above
	} else {
		tr.AllowHTTP = true                                                                                    //nolint:staticcheck // SA1019: see above
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) { //nolint:staticcheck // SA1019: see above
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	t.Cleanup(tr.CloseIdleConnections) //nolint:staticcheck // SA1019: see above
	return &http.Client{Transport: tr}
}

func (ts *testServer) url() string {
	if ts.tls {
		return "https://" + ts.addr
	}
	return "http://" + ts.addr
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var errTest = errors.New("test")
