package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	benchbpf "github.com/novaedge/novaedge/gen/bpf/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
	"github.com/novaedge/novaedge/perf/xdpbench/traffic"
)

const (
	xdpPass = 2
	xdpTx   = 3
)

// TestNodePrograms runs the reference node programs on fixed frames through
// BPF_PROG_TEST_RUN: what they return and how they rewrite the frame.
func TestNodePrograms(t *testing.T) {
	coll, err := loadNode()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coll.Close)
	genMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	nodeMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	frame := func(proto, flags uint8, dst netip.Addr, port uint16) []byte {
		b, err := traffic.Frame{
			SrcMAC: genMAC, DstMAC: nodeMAC, Src: topo.ClientBase, Dst: dst,
			SrcPort: 40000, DstPort: port, Proto: proto, TCPFlags: flags,
		}.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		prog    string
		in      []byte
		verdict uint32
		// wantDst is the destination after a rewrite; invalid: unchanged.
		wantDst netip.Addr
	}{
		{"tx swaps MACs only", benchbpf.BenchnodeProgBenchNodeTx, frame(traffic.ProtoUDP, 0, topo.VIP, topo.Port), xdpTx, netip.Addr{}},
		{"tx-min udp to the vip", benchbpf.BenchnodeProgBenchNodeTxMin, frame(traffic.ProtoUDP, 0, topo.VIP, topo.Port), xdpTx, topo.Backend},
		{"tx-min tcp syn to the vip", benchbpf.BenchnodeProgBenchNodeTxMin, frame(traffic.ProtoTCP, traffic.TCPSyn, topo.VIP, topo.Port), xdpTx, topo.Backend},
		{"tx-min tcp data to the vip", benchbpf.BenchnodeProgBenchNodeTxMin, frame(traffic.ProtoTCP, traffic.TCPAck, topo.VIP, topo.Port), xdpTx, topo.Backend},
		{"tx-min other port passes", benchbpf.BenchnodeProgBenchNodeTxMin, frame(traffic.ProtoUDP, 0, topo.VIP, topo.Port+1), xdpPass, netip.Addr{}},
		{"tx-min other address passes", benchbpf.BenchnodeProgBenchNodeTxMin, frame(traffic.ProtoUDP, 0, topo.NodeAddr, topo.Port), xdpPass, netip.Addr{}},
		{"pass", benchbpf.BenchnodeProgBenchNodePass, frame(traffic.ProtoUDP, 0, topo.VIP, topo.Port), xdpPass, netip.Addr{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]byte, len(tc.in))
			ret, err := coll.Programs[tc.prog].Run(&ebpf.RunOptions{Data: tc.in, DataOut: out})
			if err != nil {
				t.Fatal(err)
			}
			if ret != tc.verdict {
				t.Fatalf("verdict %d, want %d", ret, tc.verdict)
			}
			if ret == xdpPass {
				if string(out) != string(tc.in) {
					t.Fatal("XDP_PASS changed the frame")
				}
				return
			}
			if string(out[0:6]) != string(genMAC) || string(out[6:12]) != string(nodeMAC) {
				t.Fatalf("MACs not swapped: dst %x src %x", out[0:6], out[6:12])
			}
			want := netip.AddrFrom4([4]byte(tc.in[30:34]))
			if tc.wantDst.IsValid() {
				want = tc.wantDst
			}
			if got := netip.AddrFrom4([4]byte(out[30:34])); got != want {
				t.Fatalf("destination %s, want %s", got, want)
			}
			if err := traffic.CheckFrame(out); err != nil {
				t.Fatal(err)
			}
			if got := binary.BigEndian.Uint16(out[36:]); got != binary.BigEndian.Uint16(tc.in[36:]) {
				t.Fatalf("destination port changed to %d", got)
			}
		})
	}
}

// TestRun builds the topology, sends traffic through the xdp-tx-min case and
// the novaedge case for a second each, and checks that frames were sent and
// came back forwarded, that an unwired novaedge case reports no number, that
// a wired one is measured and judged, and that the namespaces are gone
// afterwards.
func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		novaEdge Setup
	}{
		{"novaedge not wired", nil},
		// Stands in for the fast path: what wiring it in amounts to.
		{"novaedge wired", nodeProgram(benchbpf.BenchnodeProgBenchNodeTxMin)},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saved := novaEdge
			novaEdge = tc.novaEdge
			t.Cleanup(func() { novaEdge = saved })
			prefix := fmt.Sprintf("xbt%d-%d-", os.Getpid(), i)
			t.Cleanup(func() {
				if err := topo.Remove(prefix); err != nil {
					t.Error(err)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Options{
				Prefix: prefix, Cases: []string{CaseTxMin, CaseNovaEdge}, Profiles: []string{"udp"},
				Duration: time.Second, Warmup: 200 * time.Millisecond, Reps: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range []string{prefix + "gen", prefix + "node"} {
				if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
					t.Errorf("namespace %s still exists after Run (stat: %v)", ns, err)
				}
			}
			if len(rep.Results) != 2 {
				t.Fatalf("%d results, want 2: %+v", len(rep.Results), rep.Results)
			}
			checkForwarded(t, rep.Results[0], CaseTxMin)
			if rep.Machine.GenXDP != "native" {
				t.Errorf("sink XDP mode %q, want native", rep.Machine.GenXDP)
			}
			nova := rep.Results[1]
			md := Markdown(rep)
			if tc.novaEdge == nil {
				if nova.Case != CaseNovaEdge || nova.Status != StatusNotWired || nova.PPS != 0 || len(nova.Reps) != 0 {
					t.Errorf("novaedge result %+v, want %q without a number", nova, StatusNotWired)
				}
				if !strings.Contains(md, "| "+CaseNovaEdge+" | | "+StatusNotWired+" |") {
					t.Errorf("report does not say novaedge is not wired:\n%s", md)
				}
			} else {
				checkForwarded(t, nova, CaseNovaEdge)
				if nova.VsTxMin == 0 || nova.CPUVsTxMin == 0 || !strings.Contains(md, "NovaEdge goals") {
					t.Errorf("wired novaedge not compared with %s: %+v\n%s", CaseTxMin, nova, md)
				}
			}
			dir := t.TempDir()
			mdPath, jsPath, err := Write(dir, rep)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{mdPath, jsPath} {
				if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
					t.Errorf("report file %s: %v", p, err)
				}
			}
		})
	}
}

func checkForwarded(t *testing.T, r Result, name string) {
	t.Helper()
	if r.Case != name || r.Status != "ok" || len(r.Reps) != 1 {
		t.Fatalf("result %+v, want one ok measurement of %s", r, name)
	}
	m := r.Reps[0]
	if m.Sent == 0 || m.Received == 0 {
		t.Fatalf("%s: sent %d, received %d: want both > 0", name, m.Sent, m.Received)
	}
	if m.Other != 0 {
		t.Errorf("%s: the sink counted %d frames not addressed to the backend", name, m.Other)
	}
	if r.NodeXDP != "native" {
		t.Errorf("%s: node XDP mode %q, want native", name, r.NodeXDP)
	}
}

// TestRunCancelled cancels a run in the middle of a measurement, as SIGINT
// does in the command: Run must return what it has, marked interrupted,
// with the namespaces removed.
func TestRunCancelled(t *testing.T) {
	prefix := fmt.Sprintf("xbc%d-", os.Getpid())
	t.Cleanup(func() {
		if err := topo.Remove(prefix); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(1500*time.Millisecond, cancel)
	rep, err := Run(ctx, Options{
		Prefix: prefix, Cases: []string{"xdp-tx"}, Profiles: []string{"udp"},
		Duration: time.Minute, Warmup: 100 * time.Millisecond, Reps: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted {
		t.Error("report not marked interrupted")
	}
	for _, ns := range []string{prefix + "gen", prefix + "node"} {
		if _, err := os.Stat("/run/netns/" + ns); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after a cancelled Run (stat: %v)", ns, err)
		}
	}
}
