package slowpath

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

func TestLoadQUICKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quic-keys")
	k1, created, err := LoadQUICKeys(path)
	if err != nil || !created {
		t.Fatalf("first load: created %v, %v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != int64(quicKeysSize) {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if k1.Reset == (quic.StatelessResetKey{}) || k1.Token == (quic.TokenGeneratorKey{}) || [32]byte(k1.Reset) == [32]byte(k1.Token) {
		t.Fatal("keys are not random")
	}
	k2, created, err := LoadQUICKeys(path)
	if err != nil || created || *k2 != *k1 {
		t.Fatalf("second load: created %v, %v, same keys %v", created, err, k2 != nil && *k2 == *k1)
	}
	// A file that holds no keys (cut short) is replaced.
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	k3, created, err := LoadQUICKeys(path)
	if err != nil || !created || *k3 == *k1 {
		t.Fatalf("short file: created %v, %v", created, err)
	}
	if _, _, err := LoadQUICKeys(filepath.Join(path, "sub")); err == nil {
		t.Fatal("a path under a file: no error")
	}
}

// TestQUICRestartResetsLostConnections: an agent dies without closing its
// QUIC connections (kill -9: its socket goes, nothing is sent), and the
// agent that starts next on the same port with the same keys answers the
// old connection's next packet with a stateless reset the client accepts,
// so the client gives the connection up at once instead of waiting out its
// idle timeout, and its next request is served over a new connection.
func TestQUICRestartResetsLostConnections(t *testing.T) {
	keys, _, err := LoadQUICKeys(filepath.Join(t.TempDir(), "quic-keys"))
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(probe.LocalAddr().(*net.UDPAddr).Port)
	_ = probe.Close()
	key := sockets.Key{Network: "udp", Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}
	url := "https://" + key.Addr.String() + "/"
	ca, _ := testcert.NewCA("test")
	certPEM, keyPEM, _ := ca.Leaf("h3.test")
	be := hostport(echoServer(t, "a"))
	start := func(agent string) (*Proxy, *sockets.Set) {
		t.Helper()
		set := sockets.NewSet()
		p := New(Options{Sockets: set, QUICKeys: keys, DrainTimeout: time.Second})
		ch, err := p.Compile(h3Snapshot(port, agent, be, certPEM, keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
		return p, set
	}

	first, set := start("first")
	c := newH3Client(t, &tls.Config{ServerName: "h3.test", RootCAs: ca.Pool()})
	if got := c.agentOf(t, url); got != "first" {
		t.Fatalf("served by %q", got)
	}
	conn := c.conn.Load()
	// The crash: the socket goes away with nothing sent.
	sock, ok := set.Get(key)
	if !ok {
		t.Fatal("no socket")
	}
	_ = sock.PacketConn.Close()
	t.Cleanup(first.Close)

	second, _ := start("second")
	t.Cleanup(second.Close)
	// The client's next request goes out on its old connection; the reset
	// ends it and the request is retried, or fails and the next one dials.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if resp, err := c.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("the old connection is still open: no stateless reset accepted")
	}
	var reset *quic.StatelessResetError
	if cause := context.Cause(conn.Context()); !errors.As(cause, &reset) {
		t.Fatalf("the old connection ended with %v, want a stateless reset", cause)
	}
	if got := c.agentOf(t, url); got != "second" {
		t.Fatalf("after the reset: served by %q, want second", got)
	}
}
