package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	vnetns "github.com/vishvananda/netns"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// The HTTP/3 tests below run two real agent processes one after the other
// in a network namespace, as an upgrade (handoff) or a crash (kill -9)
// does, with an HTTP/3 client inside the namespace.

const (
	// h3Host is the name in the listener's certificate.
	h3Host = "h3.novaedge.test"
	// h3URL is the HTTP/3 listener on the Local VIP.
	h3URL = "https://127.0.10.1:8443/"
)

// h3Cert is a CA and a certificate for h3Host it signed, in PEM, and the
// client TLS configuration that trusts the CA.
type h3Cert struct {
	certPEM, keyPEM []byte
	client          *tls.Config
}

func newH3Cert(t *testing.T) h3Cert {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "novaedge h3 test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: h3Host},
		DNSNames:     []string{h3Host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return h3Cert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		client:  &tls.Config{ServerName: h3Host, RootCAs: pool, MinVersion: tls.VersionTLS13},
	}
}

// writeH3Config writes a standalone configuration directory: an HTTP/3
// listener on 127.0.10.1:8443 with the certificate, routing everything to
// the demo backend at backend and answering X-Agent: agent, so a test can
// tell which agent's configuration served a request.
func writeH3Config(t *testing.T, cert h3Cert, backend, agent string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(backend)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: h3-vip
spec:
  address: 127.0.10.1/32
  mode: Local
  ports: [8443]
---
apiVersion: v1
kind: Secret
metadata:
  name: h3-cert
  namespace: h3
type: kubernetes.io/tls
data:
  tls.crt: %s
  tls.key: %s
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata:
  name: h3
  namespace: h3
spec:
  vipRef: h3-vip
  listeners:
    - name: h3
      port: 8443
      protocol: HTTP3
      hostnames: [%s]
      tls:
        secretRef:
          name: h3-cert
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata:
  name: web
  namespace: h3
spec:
  rules:
    - matches:
        - path:
            type: PathPrefix
            value: /
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set:
              - name: X-Agent
                value: %s
      backendRefs:
        - name: web
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata:
  name: web
  namespace: h3
spec:
  endpoints:
    - address: %s
      port: %s
`, base64.StdEncoding.EncodeToString(cert.certPEM), base64.StdEncoding.EncodeToString(cert.keyPEM), h3Host, agent, host, port)
	writeFile(t, filepath.Join(dir, "h3.yaml"), cfg)
	return dir
}

// startDemoBackend runs novaedgectl demo-backend in the namespace.
func startDemoBackend(t *testing.T, ns, addr, name string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, ctlBinary(t), "demo-backend", "--listen", addr, "--name", name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// nsUDP opens a UDP socket on 127.0.0.1 inside the network namespace: the
// socket is created by a thread that entered the namespace and then dies
// with its goroutine (it is never unlocked), while the socket stays in
// the namespace and can be used from any goroutine.
func nsUDP(t *testing.T, ns string) *net.UDPConn {
	t.Helper()
	h, err := vnetns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   *net.UDPConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer func() { _ = h.Close() }()
		if err := vnetns.Set(h); err != nil {
			ch <- result{err: fmt.Errorf("enter %s: %w", ns, err)}
			return
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		ch <- result{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.c
}

// nsH3Client is an HTTP/3 client in a network namespace. Its connections
// share one UDP socket that outlives them (so closing a connection
// reliably sends CONNECTION_CLOSE); it counts the connections it dials and
// keeps the last one, so a test can tell whether requests shared one.
type nsH3Client struct {
	*http.Client
	tr    *http3.Transport
	qtr   *quic.Transport
	dials atomic.Int64
	conn  atomic.Pointer[quic.Conn]
}

func newNSH3Client(t *testing.T, ns string, tlsConf *tls.Config) *nsH3Client {
	t.Helper()
	udp := nsUDP(t, ns)
	c := &nsH3Client{qtr: &quic.Transport{Conn: udp}}
	c.tr = &http3.Transport{
		TLSClientConfig: tlsConf,
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			c.dials.Add(1)
			ua, err := net.ResolveUDPAddr("udp4", addr)
			if err != nil {
				return nil, fmt.Errorf("resolve %s: %w", addr, err)
			}
			conn, err := c.qtr.DialEarly(ctx, ua, tlsCfg, cfg)
			if err != nil {
				return nil, fmt.Errorf("dial %s: %w", addr, err)
			}
			c.conn.Store(conn)
			return conn, nil
		},
	}
	c.Client = &http.Client{Transport: c.tr}
	t.Cleanup(func() {
		_ = c.tr.Close()
		_ = c.qtr.Close()
		_ = udp.Close()
	})
	return c
}

// get GETs h3URL (Host: h3Host) with a 10s bound and returns the answer's status, X-Agent
// header and body.
func (c *nsH3Client) get() (int, string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h3URL, nil)
	if err != nil {
		return 0, "", "", err
	}
	// The VIP is dialed by address; the request names the host, as the
	// certificate and the listener do.
	req.Host = h3Host
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", fmt.Errorf("read body: %w", err)
	}
	if resp.Proto != "HTTP/3.0" {
		return 0, "", "", fmt.Errorf("answered over %s", resp.Proto)
	}
	return resp.StatusCode, resp.Header.Get("X-Agent"), string(body), nil
}

// mustGet GETs h3URL and fails the test unless the demo backend answered
// 200 through the agent whose configuration says agent.
func (c *nsH3Client) mustGet(t *testing.T, what, agent string) {
	t.Helper()
	code, got, body, err := c.get()
	if err != nil {
		t.Fatalf("%s: HTTP/3 GET %s: %v", what, h3URL, err)
	}
	if code != http.StatusOK || got != agent || body != "hello from web-1\n" {
		t.Fatalf("%s: %d, X-Agent %q (want 200 from %q), body %q", what, code, got, agent, body)
	}
}

// leave closes the client's connections (CONNECTION_CLOSE) and waits
// until the last one has ended.
func (c *nsH3Client) leave(t *testing.T) {
	t.Helper()
	_ = c.tr.Close()
	if conn := c.conn.Load(); conn != nil {
		select {
		case <-conn.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("client connection still open 10s after Close")
		}
	}
}

// logWant is a line an agent's log must have: one line holding every
// part.
type logWant struct {
	p     *agentProc
	parts []string
}

// hasLine reports whether the agent's log has a line holding every part.
func (p *agentProc) hasLine(parts ...string) bool {
	for line := range strings.Lines(p.logs.String()) {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			return true
		}
	}
	return false
}

// waitLog polls until every wanted line is in its agent's log; it fails
// if an agent exits first. The deadline only bounds a broken test.
func waitLog(t *testing.T, what string, want ...logWant) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing *logWant
		for i, w := range want {
			select {
			case err := <-w.p.done:
				w.p.done <- err // for whoever waits next
				t.Fatalf("an agent exited (%v) while waiting for %s; its log:\n%s", err, what, w.p.logs.String())
			default:
			}
			if !w.p.hasLine(w.parts...) {
				missing = &want[i]
			}
		}
		if missing == nil {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, w := range want {
				fmt.Fprintf(&b, "--- pid %d:\n%s", w.p.cmd.Process.Pid, w.p.logs.String())
			}
			t.Fatalf("timed out waiting for %s (no line with %q in pid %d's log):\n%s", what, missing.parts, missing.p.cmd.Process.Pid, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// udpSocketsIn counts the UDP sockets bound to 127.0.10.1:8443 in the
// network namespace (its /proc/net/udp): each agent serving the HTTP/3
// listener has one in the listener's reuseport group.
func udpSocketsIn(t *testing.T, ns string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/udp").CombinedOutput()
	if err != nil {
		t.Fatalf("/proc/net/udp in %s: %v\n%s", ns, err, out)
	}
	const vip = "010A007F:20FB" // 127.0.10.1:8443 as the kernel prints it
	n := 0
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == vip {
			n++
		}
	}
	return n
}

// TestUpgradeKeepsHTTP3Connections: an HTTP/3 connection opened to the
// running agent survives the start of a new agent process that takes the
// sockets over: its further requests are served on the same QUIC
// connection by the old agent (the kernel steers its packets to the old
// agent's socket by the generation in the connection ID), while a new
// connection is served by the new agent. When the client closes its
// connection, the old agent exits cleanly and the new one serves on.
func TestUpgradeKeepsHTTP3Connections(t *testing.T) {
	ns := netns(t)
	startDemoBackend(t, ns, "127.0.0.1:18081", "web-1")
	cert := newH3Cert(t)
	// Each agent gets its own configuration, the same but for the X-Agent
	// header, so every answer says which agent served it.
	oldCfg := writeH3Config(t, cert, "127.0.0.1:18081", "old")
	newCfg := writeH3Config(t, cert, "127.0.0.1:18081", "new")
	dir := t.TempDir()
	// The fast path plays no part in HTTP/3 (the slow path serves it) and
	// would pin programs on this host's bpffs.
	old := startAgentIn(t, ns, dir, true, "--config", oldCfg, "--fastpath", "off")

	before := newNSH3Client(t, ns, cert.client)
	before.mustGet(t, "before the upgrade", "old")
	conn := before.conn.Load()

	next := startAgentIn(t, ns, dir, false, "--config", newCfg, "--fastpath", "off")
	waitLog(t, "the handoff",
		logWant{old, []string{"handed the listening sockets to a new agent"}},
		logWant{next, []string{"took over the running agent's listening sockets", "generation=1"}})
	for i := range 20 {
		before.mustGet(t, fmt.Sprintf("request %d on the connection opened before the upgrade", i), "old")
	}
	if n := before.dials.Load(); n != 1 || before.conn.Load() != conn || conn.Context().Err() != nil {
		t.Fatalf("the client dialed %d connections across the upgrade (connection ended: %v); want its one connection kept",
			n, context.Cause(conn.Context()))
	}
	after := newNSH3Client(t, ns, cert.client)
	after.mustGet(t, "a new connection after the handoff", "new")
	if n := udpSocketsIn(t, ns); n != 2 {
		t.Fatalf("%d UDP sockets on 127.0.10.1:8443 while both agents serve, want 2 (one each)", n)
	}

	// The client leaves; the old agent finishes draining and exits. Half
	// its 30s drain timeout bounds how long it keeps its connections; the
	// 60s here only bound a broken test.
	left := time.Now()
	before.leave(t)
	select {
	case err := <-old.done:
		if err != nil {
			t.Fatalf("the old agent exited with %v; its log:\n%s", err, old.logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the old agent still runs 60s after its last HTTP/3 client left; its log:\n%s\nthe new one's:\n%s", old.logs.String(), next.logs.String())
	}
	t.Logf("the old agent exited %v after its last HTTP/3 client left", time.Since(left).Round(time.Millisecond))
	if n := udpSocketsIn(t, ns); n != 1 {
		t.Fatalf("%d UDP sockets on 127.0.10.1:8443 after the old agent exited, want the new agent's 1", n)
	}
	// The admin socket is the new agent's once the old one has gone.
	next.waitStatus(t, "the new agent's admin API", func(st *pb.AgentStatus) bool { return st.GetReady() })
	after.mustGet(t, "the new connection after the old agent exited", "new")
	fresh := newNSH3Client(t, ns, cert.client)
	fresh.mustGet(t, "a new connection after the old agent exited", "new")
	if n := after.dials.Load(); n != 1 {
		t.Fatalf("the client of the new agent dialed %d connections, want 1", n)
	}
	for name, p := range map[string]*agentProc{"old": old, "new": next} {
		if logs := p.logs.String(); strings.Contains(logs, "no QUIC steering") {
			t.Fatalf("the %s agent ran without QUIC steering; its log:\n%s", name, logs)
		}
	}
	next.stop(t)
}

// TestCrashResetsHTTP3Connections: an agent killed with SIGKILL sends
// nothing to its HTTP/3 clients; the agent started next with the same
// --state-dir has the same QUIC keys, so it answers the lost connection's
// next packet with a stateless reset that the client accepts, and the
// client's retry goes over a new connection.
func TestCrashResetsHTTP3Connections(t *testing.T) {
	ns := netns(t)
	startDemoBackend(t, ns, "127.0.0.1:18081", "web-1")
	cert := newH3Cert(t)
	cfg := writeH3Config(t, cert, "127.0.0.1:18081", "agent")
	dir := t.TempDir()
	first := startAgentIn(t, ns, dir, true, "--config", cfg, "--fastpath", "off")
	// The log comes through a pipe: the line may follow the readiness.
	first.waitLog(t, "the creation of its HTTP/3 keys", "new HTTP/3 keys")
	c := newNSH3Client(t, ns, cert.client)
	c.mustGet(t, "before the crash", "agent")
	conn := c.conn.Load()

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-first.done; err == nil {
		t.Fatal("the killed agent exited with status 0")
	}
	// The dead agent's handoff and admin sockets are left behind; the next
	// agent finds no one behind them.
	if _, err := os.Stat(filepath.Join(dir, "handoff.sock")); err != nil {
		t.Fatalf("the killed agent's handoff socket: %v", err)
	}
	second := startAgentIn(t, ns, dir, true, "--config", cfg, "--fastpath", "off")
	if logs := second.logs.String(); strings.Contains(logs, "new HTTP/3 keys") || strings.Contains(logs, "took over") {
		t.Fatalf("the second agent made new HTTP/3 keys or took sockets over from a dead agent; its log:\n%s", logs)
	}

	// The client's next request goes out on its old connection; the
	// reset ends the connection, and the request either is retried on a
	// new one or fails.
	deadline := time.After(10 * time.Second)
	_, _, _, _ = c.get()
	select {
	case <-conn.Context().Done():
	case <-deadline:
		t.Fatalf("the connection to the killed agent is still open 10s after its next request: no stateless reset accepted\nsecond agent's log:\n%s", second.logs.String())
	}
	var reset *quic.StatelessResetError
	if cause := context.Cause(conn.Context()); !errors.As(cause, &reset) {
		t.Fatalf("the connection to the killed agent ended with %v, want a stateless reset", cause)
	}
	c.mustGet(t, "after the reset", "agent")
	if n := c.dials.Load(); n != 2 {
		t.Fatalf("the client dialed %d connections, want 2 (one to each agent)", n)
	}
	if logs := second.logs.String(); strings.Contains(logs, "no QUIC steering") {
		t.Fatalf("the second agent ran without QUIC steering; its log:\n%s", logs)
	}
	second.stop(t)
}
