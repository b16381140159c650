package bfdd

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
)

func TestSpecRoundTrip(t *testing.T) {
	cfg := bfd.SessionConfig{Peer: netip.MustParseAddr("fd83::2"), Local: netip.MustParseAddr("fd83::1"), Interface: "eth1",
		DetectMultiplier: 4, DesiredMinTx: 150 * time.Millisecond, RequiredMinRx: 250 * time.Millisecond, ControlPlaneIndependent: true}
	got, err := fromSpec(toSpec(cfg))
	if err != nil || got != cfg {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, cfg)
	}
	st := bfd.SessionState{SessionKey: cfg.Key(), Config: cfg, State: bfd.StateUp, RemoteState: bfd.StateInit, Diag: bfd.DiagNeighborDown,
		LocalDiscriminator: 7, RemoteDiscriminator: 9, RemoteDetectMultiplier: 3, TxInterval: time.Second, DetectionTime: 900 * time.Millisecond,
		LastChange: time.Unix(100, 5), Counters: bfd.Counters{PacketsSent: 10, Ups: 2, Downs: 1}}
	back, err := fromState(toState(st))
	if err != nil || back != st {
		t.Fatalf("state round trip:\n got %+v, %v\nwant %+v", back, err, st)
	}
}

func TestFromSpecNamesTheField(t *testing.T) {
	tests := []struct {
		spec *pb.BFDSessionSpec
		want string
	}{
		{&pb.BFDSessionSpec{Peer: "x", Local: "10.0.0.1"}, `peer "x"`},
		{&pb.BFDSessionSpec{Peer: "10.0.0.2", Local: ""}, `local ""`},
		{&pb.BFDSessionSpec{Peer: "10.0.0.2", Local: "10.0.0.1", DetectMultiplier: 256}, "detect_multiplier 256"},
		{&pb.BFDSessionSpec{Peer: "10.0.0.2", Local: "10.0.0.1", DesiredMinTxUs: 1 << 40}, "desired_min_tx_us"},
		{&pb.BFDSessionSpec{Peer: "10.0.0.2", Local: "fd00::1"}, "Local: fd00::1 is not of the same address family"},
		{&pb.BFDSessionSpec{Peer: "10.0.0.2", Local: "10.0.0.1", RequiredMinRxUs: 5}, "RequiredMinRx: 5µs is below the minimum"},
	}
	for _, tc := range tests {
		_, err := fromSpec(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to name %q", tc.spec, err, tc.want)
		}
	}
}
