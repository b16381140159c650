package traffic

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"

	benchbpf "github.com/novaedge/novaedge/gen/bpf/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/internal/sys"
)

var (
	srcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	dstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	client = netip.MustParseAddr("10.78.0.1")
	vip    = netip.MustParseAddr("10.77.1.1")
)

func profileFrame(t *testing.T, p Profile, size int) []byte {
	t.Helper()
	b, err := Frame{
		SrcMAC: srcMAC, DstMAC: dstMAC, Src: client, Dst: vip,
		SrcPort: SportBase, DstPort: 8080, Proto: p.Proto, TCPFlags: p.TCPFlags, Size: size,
	}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFrameBytes(t *testing.T) {
	for _, p := range Profiles() {
		for _, size := range []int{0, 128, 1514} {
			t.Run(fmt.Sprintf("%s/%d", p.Name, size), func(t *testing.T) {
				b := profileFrame(t, p, size)
				if want := max(size, MinFrame); len(b) != want {
					t.Fatalf("frame is %d bytes, want %d", len(b), want)
				}
				if err := CheckFrame(b); err != nil {
					t.Fatal(err)
				}
				// A corrupted byte must be caught, or CheckFrame proves nothing.
				b[14+12] ^= 0x01
				if err := CheckFrame(b); err == nil {
					t.Fatal("CheckFrame accepted a frame with a changed source address")
				}
			})
		}
	}
}

// TestGeneratorFlows runs the generator program without live frames, so
// that the kernel returns each frame, and checks that flows advance through
// source ports and addresses with valid checksums, and that a frame the node
// rewrote is rebuilt in full.
func TestGeneratorFlows(t *testing.T) {
	tests := []struct {
		name, profile string
		flows         uint32
	}{
		{"udp 65536 flows", "udp", 65536},
		{"udp 3 source addresses", "udp", 3 * SportSpan},
		{"udp fixed", "udp-1flow", 1},
		{"tcp syn", "tcp-syn", 65536},
		{"tcp ack", "tcp-ack", 65536},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The flow sequence is per CPU and includes the CPU number:
			// stay on CPU 0. The thread is not unlocked, so it ends with
			// the test instead of running others with this affinity.
			runtime.LockOSThread()
			if err := sys.PinTask(0, 0); err != nil {
				t.Fatal(err)
			}
			p, err := ProfileByName(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			var objs benchbpf.BenchgenObjects
			if err := benchbpf.LoadBenchgenObjects(&objs, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = objs.Close() })
			g := &Generator{opts: GeneratorOptions{CPUs: []int{0}}, objs: objs}
			frame := profileFrame(t, p, 0)
			if err := g.Configure(frame, p.Proto, tc.flows); err != nil {
				t.Fatal(err)
			}
			// Start from a frame the node has rewritten: zeroed headers.
			in := make([]byte, len(frame))
			out := make([]byte, len(frame))
			// Step through the sequence, jumping over most of it so that
			// the source address changes too.
			step := uint64(max(tc.flows/7, 1)) + 1
			for i := range uint64(20) {
				seq := i * step
				if err := objs.GenCounts.Update(uint32(0), []benchbpf.BenchgenGenStats{{Sent: seq}}, ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
				ret, err := objs.BenchGen.Run(&ebpf.RunOptions{Data: in, DataOut: out})
				if err != nil {
					t.Fatal(err)
				}
				if ret != 3 { // XDP_TX
					t.Fatalf("verdict %d, want XDP_TX", ret)
				}
				if err := CheckFrame(out); err != nil {
					t.Fatalf("flow of sequence %d: %v", seq, err)
				}
				flow := uint32(seq % uint64(tc.flows))
				sport := binary.BigEndian.Uint16(out[34:])
				src := netip.AddrFrom4([4]byte(out[26:30]))
				wantPort := uint16(SportBase + flow%SportSpan)
				wantSrc := addrAdd(client, flow/SportSpan)
				if sport != wantPort || src != wantSrc {
					t.Fatalf("sequence %d: source %s:%d, want %s:%d", seq, src, sport, wantSrc, wantPort)
				}
				if string(out[:12]) != string(frame[:12]) || string(out[30:34]) != string(frame[30:34]) {
					t.Fatalf("sequence %d: MACs or destination not rebuilt from the template", seq)
				}
			}
			n, err := g.Sent()
			if err != nil {
				t.Fatal(err)
			}
			if want := 19*step + 1; n != want {
				t.Fatalf("Sent() = %d, want %d", n, want)
			}
		})
	}
}

func addrAdd(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(b[:])+n)))
}

// TestSinkCounts runs the sink program on fixed frames: only frames to the
// expected address and port count as forwarded, and all are dropped.
func TestSinkCounts(t *testing.T) {
	s := &Sink{}
	if err := benchbpf.LoadBenchsinkObjects(&s.objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.objs.Close() })
	backend := netip.MustParseAddr("10.77.0.2")
	if err := s.Expect(backend, 8080); err != nil {
		t.Fatal(err)
	}
	frame := func(dst netip.Addr, port uint16, proto uint8) []byte {
		b, err := Frame{SrcMAC: srcMAC, DstMAC: dstMAC, Src: client, Dst: dst, SrcPort: 1, DstPort: port, Proto: proto}.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	arp := make([]byte, 64)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	tests := []struct {
		name    string
		in      []byte
		matched bool
	}{
		{"udp to the backend", frame(backend, 8080, ProtoUDP), true},
		{"tcp to the backend", frame(backend, 8080, ProtoTCP), true},
		{"to the vip", frame(vip, 8080, ProtoUDP), false},
		{"other port", frame(backend, 8081, ProtoUDP), false},
		{"not ipv4", arp, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.Counts()
			if err != nil {
				t.Fatal(err)
			}
			ret, err := s.objs.BenchSink.Run(&ebpf.RunOptions{Data: tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if ret != 1 { // XDP_DROP
				t.Fatalf("verdict %d, want XDP_DROP", ret)
			}
			after, err := s.Counts()
			if err != nil {
				t.Fatal(err)
			}
			want := before
			if tc.matched {
				want.Matched++
			} else {
				want.Other++
			}
			if after != want {
				t.Fatalf("counts %+v, want %+v", after, want)
			}
		})
	}
}
