package quicsteer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/sockets/internal/reuseport"
)

// listenGroup opens n UDP sockets on one 127.0.0.1 port, all with
// SO_REUSEPORT, so they form one reuseport group.
// steeredGroup is a steering Group (closed when the test ends) of n
// sockets of one reuseport group, socket i of generation first+i.
func steeredGroup(t *testing.T, n int, first uint8) (*Group, []*net.UDPConn) {
	t.Helper()
	socks := listenGroup(t, n)
	g, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	for i, s := range socks {
		if err := g.Join(s, first+uint8(i)); err != nil {
			t.Fatal(err)
		}
	}
	return g, socks
}

func listenGroup(t *testing.T, n int) []*net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: reuseport.Enable}
	var out []*net.UDPConn
	addr := "127.0.0.1:0"
	for range n {
		pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := pc.(*net.UDPConn)
		t.Cleanup(func() { _ = c.Close() })
		addr = c.LocalAddr().String()
		out = append(out, c)
	}
	return out
}

// Packets of the kinds the program tells apart. Every one ends with a tag
// byte that tells them apart at the receiver; the bytes before it decide
// the steering.
func longHeader(first byte, version uint32, dcid []byte) []byte {
	b := []byte{first}
	b = binary.BigEndian.AppendUint32(b, version)
	b = append(b, byte(len(dcid)))
	b = append(b, dcid...)
	b = append(b, 8)                      // SCID length
	b = append(b, 1, 2, 3, 4, 5, 6, 7, 8) // SCID
	return append(b, bytes.Repeat([]byte{0xaa}, 20)...)
}

func shortHeader(gen byte) []byte {
	b := []byte{0x40 | 0x01, gen, 1, 2, 3, 4, 5, 6, 7}
	return append(b, bytes.Repeat([]byte{0xbb}, 20)...)
}

func cid(gen byte) []byte { return []byte{gen, 9, 9, 9, 9, 9, 9, 9} }

// TestSteering runs the program in the kernel on a real reuseport group
// (BPF_PROG_TEST_RUN does not support SK_REUSEPORT programs): the sockets
// of generations 0 and 1 on one port, generation 1 the newest. Each
// crafted datagram is sent from a client socket and must arrive at the
// socket of the expected generation; a marker sent to each socket at the
// end proves no datagram went to the other one.
func TestSteering(t *testing.T) {
	g, socks := steeredGroup(t, 2, 0)
	if err := g.Activate(1); err != nil {
		t.Fatal(err)
	}
	if n, err := g.Newest(); err != nil || n != 1 {
		t.Fatalf("Newest() = %d, %v", n, err)
	}
	client, err := net.DialUDP("udp4", nil, socks[0].LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()

	type tc struct {
		name string
		pkt  []byte
		want int // index into socks
	}
	steer := func(t *testing.T, cases []tc, socks []*net.UDPConn) {
		t.Helper()
		for i, c := range cases {
			pkt := append(append([]byte(nil), c.pkt...), byte(i))
			if _, err := client.Write(pkt); err != nil {
				t.Fatal(err)
			}
			if got := readOne(t, socks[c.want]); !bytes.Equal(got, pkt) {
				t.Errorf("%s: socket %d got %x, want %x", c.name, c.want, got, pkt)
			}
		}
	}
	steer(t, []tc{
		{"v1 Initial with a gen-0 DCID", longHeader(0xc0, 1, cid(0)), 1},
		{"v1 0-RTT with a gen-0 DCID", longHeader(0xd0, 1, cid(0)), 1},
		{"v1 Handshake gen 0", longHeader(0xe0, 1, cid(0)), 0},
		{"v1 Handshake gen 1", longHeader(0xe0, 1, cid(1)), 1},
		{"v2 Initial with a gen-0 DCID", longHeader(0xd0, 0x6b3343cf, cid(0)), 1},
		{"v2 Handshake gen 0", longHeader(0xf0, 0x6b3343cf, cid(0)), 0},
		{"unknown version gen 0", longHeader(0xe0, 0x1a2a3a4a, cid(0)), 1},
		{"Handshake gen 0 with a foreign DCID length", longHeader(0xe0, 1, []byte{0, 1, 2, 3}), 1},
		{"short header gen 0", shortHeader(0), 0},
		{"short header gen 1", shortHeader(1), 1},
		{"short header gen 7 (no socket)", shortHeader(7), 1},
		{"short header gen 0 without the fixed bit", append([]byte{0x01}, shortHeader(0)[1:]...), 1},
		{"short header gen 0 cut short", []byte{0x41, 0, 1}, 1},
		{"garbage", []byte("\x00 not quic at all, not at all"), 1},
		{"one byte", nil, 1}, // just the tag: a short header without the fixed bit
	}, socks)
	// Nothing reached the wrong socket: each socket's next datagram is
	// its marker (a gen-addressed short header, in order per socket).
	for gen := range socks {
		steer(t, []tc{{"marker", shortHeader(byte(gen)), gen}}, socks)
	}

	if st, err := g.Stats(); err != nil || st != (Stats{ByConnectionID: 7, Newest: 10}) {
		t.Errorf("Stats() = %+v, %v; want 7 by connection ID, 10 to the newest", st, err)
	}

	// The newest process exits: its socket leaves the array, and even
	// its own connections' packets go to the one left (the kernel's
	// fallback, by hash among the group).
	_ = socks[1].Close()
	steer(t, []tc{
		{"short header gen 1 after its socket closed", shortHeader(1), 0},
		{"Initial after the newest closed", longHeader(0xc0, 1, cid(5)), 0},
	}, socks)
	if st, err := g.Stats(); err != nil || st.Unselected != 2 {
		t.Errorf("Stats() = %+v, %v; want 2 unselected", st, err)
	}
}

// TestSteeringOldGenerationGone: once the old process has closed its
// socket, packets of its connections go to the newest (which answers them
// with a stateless reset) instead of being lost.
func TestSteeringOldGenerationGone(t *testing.T) {
	g, socks := steeredGroup(t, 2, 41)
	if err := g.Activate(42); err != nil {
		t.Fatal(err)
	}
	client, err := net.DialUDP("udp4", nil, socks[0].LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	send := func(pkt []byte) {
		if _, err := client.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	send(shortHeader(41))
	if got := readOne(t, socks[0]); got[1] != 41 {
		t.Fatalf("gen 41 packet at the gen-41 socket: %x", got)
	}
	_ = socks[0].Close()
	send(shortHeader(41))
	if got := readOne(t, socks[1]); got[1] != 41 {
		t.Fatalf("gen 41 packet after its socket closed: %x", got)
	}
}

// TestFromFDs: a Group rebuilt from another's descriptors (as a successor
// does) updates the same maps; descriptors of the wrong kinds are refused.
func TestFromFDs(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// What a successor receives: its own descriptors for a's objects.
	received := func(pick func(fds [NumFDs]int) [NumFDs]int) [NumFDs]int {
		c, err := a.Clone()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var out [NumFDs]int
		for i, fd := range pick(c.FDs()) {
			out[i] = dupFD(t, fd)
		}
		return out
	}
	b, err := FromFDs(received(func(fds [NumFDs]int) [NumFDs]int { return fds }))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Activate(9); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Newest(); err != nil || n != 9 {
		t.Fatalf("a sees newest %d, %v; want 9", n, err)
	}
	allSocks := received(func(fds [NumFDs]int) [NumFDs]int { return [NumFDs]int{fds[1], fds[1], fds[1], fds[1]} })
	if _, err := FromFDs(allSocks); err == nil || !strings.Contains(err.Error(), "steering program") {
		t.Fatalf("FromFDs with the socket array everywhere: %v", err)
	}
}

func TestConnIDGenerator(t *testing.T) {
	for _, gen := range []uint8{0, 1, 255} {
		g := ConnIDGenerator{Generation: gen}
		if g.ConnectionIDLen() != CIDLen {
			t.Fatalf("ConnectionIDLen() = %d", g.ConnectionIDLen())
		}
		seen := map[string]bool{}
		for range 100 {
			id, err := g.GenerateConnectionID()
			if err != nil {
				t.Fatal(err)
			}
			b := id.Bytes()
			if len(b) != CIDLen || b[0] != gen {
				t.Fatalf("generation %d: connection ID %x", gen, b)
			}
			if seen[string(b)] {
				t.Fatalf("generation %d: connection ID %x issued twice", gen, b)
			}
			seen[string(b)] = true
		}
	}
}

func readOne(t *testing.T, c *net.UDPConn) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no datagram at %s", c.LocalAddr())
		}
		t.Fatal(err)
	}
	return buf[:n]
}
