package frr

import (
	"net/netip"
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
