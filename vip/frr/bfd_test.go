package frr

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/vip/bfd"
)

// bfddPeers is FRR 8.4's show bfd peers json (trimmed of fields the parser
// ignores): one session Up, one taken down by its peer, one multihop
// session and one without a local address, which are not the agent's.
const bfddPeers = `[
  {"multihop":false,"peer":"10.99.0.2","local":"10.99.0.1","vrf":"default","id":1419893562,"remote-id":2484197304,
   "status":"up","uptime":2,"diagnostic":"ok","remote-diagnostic":"ok","receive-interval":300,"transmit-interval":300,
   "detect-multiplier":3,"remote-receive-interval":300,"remote-transmit-interval":200,"remote-detect-multiplier":5},
  {"multihop":false,"peer":"10.99.0.3","local":"10.99.0.1","interface":"eth1","id":253476114,"remote-id":0,
   "status":"down","downtime":1,"diagnostic":"neighbor signaled session down","remote-diagnostic":"administratively down",
   "receive-interval":300,"transmit-interval":300,"detect-multiplier":3},
  {"multihop":true,"peer":"10.99.0.4","local":"10.99.0.1","status":"up"},
  {"multihop":false,"peer":"10.99.0.5","status":"up"}
]`

func TestParseBFDPeers(t *testing.T) {
	now := time.Unix(1000, 0)
	got, err := parseBFDPeers([]byte(bfddPeers), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("parsed %d sessions, want the 2 single-hop ones with a local address: %+v", len(got), got)
	}
	up := got[bfd.SessionKey{Peer: netip.MustParseAddr("10.99.0.2"), Local: netip.MustParseAddr("10.99.0.1")}]
	if up.State != bfd.StateUp || up.RemoteState != bfd.StateUp || up.LocalDiscriminator != 1419893562 ||
		up.RemoteDetectMultiplier != 5 || up.RxInterval != 300*time.Millisecond || up.DetectionTime != 1500*time.Millisecond {
		t.Errorf("up session %+v", up)
	}
	down := got[bfd.SessionKey{Peer: netip.MustParseAddr("10.99.0.3"), Local: netip.MustParseAddr("10.99.0.1"), Interface: "eth1"}]
	if down.State != bfd.StateDown || down.Diag != bfd.DiagNeighborDown || down.RemoteState != bfd.StateAdminDown {
		t.Errorf("down session %+v: want Down, neighbor down, the peer AdminDown", down)
	}
	ev := bfd.StateChange{From: bfd.StateUp, To: down.State, RemoteState: down.RemoteState}
	if ev.PathFailed() {
		t.Error("a peer's AdminDown counts as a path failure")
	}
	if _, err := parseBFDPeers([]byte("% Unknown command"), now); err == nil {
		t.Error("vtysh's error text parsed as sessions")
	}
}

// fakeVtysh writes a vtysh stand-in that records each call's commands (one
// line per call) and answers show bfd peers json with no peers. The real
// bfdd is exercised by test/vip; this checks what BFDPeers writes.
func fakeVtysh(t *testing.T) (path, log string) {
	dir := t.TempDir()
	path, log = filepath.Join(dir, "vtysh"), filepath.Join(dir, "calls")
	script := "#!/bin/sh\ncase \"$*\" in *'show bfd peers json'*) echo '[]'; exit 0;; esac\n" +
		"shift 2\nout=''\nwhile [ $# -gt 0 ]; do out=\"$out$2 / \"; shift 2; done\necho \"$out\" >> " + log + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, log
}

// TestBFDPeersOwnership: the peers an agent wrote are recorded; the next
// agent keeps those it adds again and removes the others once Ready, and
// never touches a peer it did not write.
func TestBFDPeersOwnership(t *testing.T) {
	vtysh, calls := fakeVtysh(t)
	state := filepath.Join(t.TempDir(), "peers.json")
	cfg := func(peer string) bfd.SessionConfig {
		return bfd.SessionConfig{Peer: netip.MustParseAddr(peer), Local: netip.MustParseAddr("10.99.0.1"), ControlPlaneIndependent: true}
	}
	first, err := NewBFDPeers(BFDOptions{Vtysh: vtysh, SocketDir: t.TempDir(), StateFile: state, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.99.0.2", "10.99.0.3"} {
		if _, err := first.AddSession(cfg(p)); err != nil {
			t.Fatal(err)
		}
	}
	first.Ready()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(calls, 0); err != nil {
		t.Fatal(err)
	}

	second, err := NewBFDPeers(BFDOptions{Vtysh: vtysh, SocketDir: t.TempDir(), StateFile: state, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Close() }()
	if _, err := second.AddSession(cfg("10.99.0.2")); err != nil {
		t.Fatal(err)
	}
	second.Ready()
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if !strings.Contains(log, "no peer 10.99.0.3 local-address 10.99.0.1") {
		t.Errorf("the peer the second agent does not want was not removed; calls:\n%s", log)
	}
	if strings.Contains(log, "no peer 10.99.0.2") {
		t.Errorf("the adopted peer was removed; calls:\n%s", log)
	}
	rec, err := os.ReadFile(state)
	if err != nil || strings.Contains(string(rec), "10.99.0.3") || !strings.Contains(string(rec), "10.99.0.2") {
		t.Errorf("state file after Ready (%v):\n%s", err, rec)
	}
}
