package sockets

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/novaedge/novaedge/slowpath/sockets/internal/fdpass"
	"github.com/novaedge/novaedge/slowpath/sockets/quicsteer"
)

// openUDP opens a UDP socket on a free 127.0.0.1 port in a new set and
// returns the set and the key.
func openUDP(t *testing.T) (*Set, Key) {
	t.Helper()
	probe, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"udp", netip.MustParseAddrPort(probe.LocalAddr().String())}
	_ = probe.Close()
	s := NewSet()
	if _, err := s.Open(context.Background(), []Key{k}); err != nil {
		t.Fatal(err)
	}
	return s, k
}

// inherit retries Inherit until the predecessor's handoff socket is up.
func inherit(t *testing.T, s *Set, path string) ([]Key, func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, confirm, err := s.Inherit(path)
		if errors.Is(err, ErrNoPredecessor) && time.Now().Before(deadline) {
			waitABit()
			continue
		}
		if err != nil {
			t.Fatalf("Inherit: %v", err)
		}
		return keys, confirm
	}
}

// quicShort is a QUIC short-header packet whose destination connection ID
// names generation gen, followed by a tag.
func quicShort(gen byte, tag string) []byte {
	return append([]byte{0x41, gen, 1, 2, 3, 4, 5, 6, 7}, tag...)
}

// quicInitial is a QUIC v1 Initial packet (new connection), with a tag.
func quicInitial(tag string) []byte {
	b := []byte{0xc0, 0, 0, 0, 1, 8, 0, 1, 2, 3, 4, 5, 6, 7, 0}
	return append(b, tag...)
}

func recvTag(t *testing.T, pc net.PacketConn, want []byte) {
	t.Helper()
	buf := make([]byte, 2048)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("waiting for %q at %s: %v", want, pc.LocalAddr(), err)
	}
	if string(buf[:n]) != string(want) {
		t.Fatalf("got %q, want %q", buf[:n], want)
	}
}

// TestHandoffQUICSteering hands a steered UDP socket to a successor: the
// successor gets its own socket in the same reuseport group at generation
// 1 instead of the predecessor's; after it activates, new connections and
// generation-1 packets reach it while generation-0 packets still reach the
// predecessor, which reports HandedOff. When the predecessor closes, its
// packets go to the successor, and once both are closed the kernel frees
// the program (nothing pinned, nothing leaked).
func TestHandoffQUICSteering(t *testing.T) {
	a, k := openUDP(t)
	defer a.Close()
	if err := a.SteerQUIC(k); err != nil {
		t.Fatalf("SteerQUIC: %v", err)
	}
	old, _ := a.Get(k)
	progID := programID(t, old.steer)

	path := filepath.Join(t.TempDir(), "handoff.sock")
	handed := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- a.ServeHandoff(context.Background(), path, func() { close(handed) }) }()

	b := NewSet()
	defer b.Close()
	keys, confirm := inherit(t, b, path)
	if len(keys) != 1 || keys[0] != k {
		t.Fatalf("inherited %v", keys)
	}
	if b.Generation() != 1 {
		t.Fatalf("successor generation %d, want 1", b.Generation())
	}
	succ, _ := b.Get(k)
	if !succ.Steered() {
		t.Fatal("successor's socket is not steered")
	}
	// The successor attached its own program (on the shared maps).
	succProgID := programID(t, succ.steer)
	if succProgID == progID {
		t.Fatal("the successor runs the predecessor's program, not its own")
	}
	client, err := net.Dial("udp4", k.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	send := func(p []byte) {
		t.Helper()
		if _, err := client.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	// Joined but not active yet: new connections still go to the
	// predecessor.
	send(quicInitial("before-activate"))
	recvTag(t, old.PacketConn, quicInitial("before-activate"))

	if err := b.SteerQUIC(k); err != nil {
		t.Fatal(err)
	}
	if err := confirm(); err != nil {
		t.Fatal(err)
	}
	<-handed
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !old.HandedOff() {
		t.Fatal("predecessor's socket does not report HandedOff")
	}
	// Passing the socket must not switch it to blocking mode, or the
	// predecessor's batched reads would wait for whole batches.
	if !nonBlocking(t, old.PacketConn) {
		t.Fatal("the handoff left the predecessor's socket in blocking mode")
	}
	for _, c := range []struct {
		pkt []byte
		to  net.PacketConn
	}{
		{quicShort(0, "old-conn"), old.PacketConn},
		{quicInitial("new-conn"), succ.PacketConn},
		{quicShort(1, "new-conn-2"), succ.PacketConn},
		{quicShort(0, "old-conn-2"), old.PacketConn},
	} {
		send(c.pkt)
		recvTag(t, c.to, c.pkt)
	}

	// The predecessor exits.
	a.Close()
	send(quicShort(0, "after-old-closed"))
	recvTag(t, succ.PacketConn, quicShort(0, "after-old-closed"))

	b.Close()
	for _, id := range []ebpf.ProgramID{progID, succProgID} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				break
			}
			_ = p.Close()
			if time.Now().After(deadline) {
				t.Fatalf("steering program %d still loaded after every socket closed", id)
			}
			waitABit()
		}
	}
}

func programID(t *testing.T, g *quicsteer.Group) ebpf.ProgramID {
	t.Helper()
	fds := g.FDs()
	d, err := dup(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgramFromFD(d)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	pi, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := pi.ID()
	if !ok {
		t.Fatal("no program ID")
	}
	return id
}

// TestInheritFromOldAgent: a predecessor that predates steering (no
// generation in its header) hands over as before: the successor adopts
// its socket, keeps generation 0 and answers exactly "ok".
func TestInheritFromOldAgent(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	f, err := pc.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	key := "udp " + pc.LocalAddr().String()

	path := filepath.Join(t.TempDir(), "handoff.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	answer := make(chan string, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			answer <- err.Error()
			return
		}
		defer func() { _ = c.Close() }()
		msg, _ := json.Marshal(map[string]any{"keys": []string{key}})
		if _, _, err := c.WriteMsgUnix(append(msg, '\n'), fdpass.Rights([]int{int(f.Fd())}), nil); err != nil {
			answer <- err.Error()
			return
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line = err.Error()
		}
		answer <- line
	}()
	s := NewSet()
	defer s.Close()
	keys, confirm := inherit(t, s, path)
	if len(keys) != 1 || keys[0].String() != key || s.Generation() != 0 {
		t.Fatalf("inherited %v at generation %d", keys, s.Generation())
	}
	if sock, _ := s.Get(keys[0]); sock.Steered() {
		t.Fatal("socket from an old agent claims steering")
	}
	if err := confirm(); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; got != "ok\n" {
		t.Fatalf("old agent got %q, want %q", got, "ok\n")
	}
}

// TestHandoffToOldAgent: a successor that predates steering (takes the
// sockets, never asks for the steering, answers "ok") gets every socket as
// before, and the steered socket is not HandedOff: the predecessor stops
// serving it at once, as before steering.
func TestHandoffToOldAgent(t *testing.T) {
	a, k := openUDP(t)
	defer a.Close()
	if err := a.SteerQUIC(k); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "handoff.sock")
	handed := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- a.ServeHandoff(context.Background(), path, func() { close(handed) }) }()
	var c *net.UnixConn
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		waitABit()
	}
	defer func() { _ = c.Close() }()
	// What an old successor checks: one descriptor per key.
	var hdr struct {
		Keys []string `json:"keys"`
	}
	fds, err := recvJSON(c, &hdr, maxHandoff)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(fds)
	if len(hdr.Keys) != len(fds) || len(fds) != 1 {
		t.Fatalf("%d keys, %d descriptors", len(hdr.Keys), len(fds))
	}
	if _, err := c.Write([]byte("ok\n")); err != nil {
		t.Fatal(err)
	}
	<-handed
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if sock, _ := a.Get(k); sock.HandedOff() {
		t.Fatal("socket HandedOff to a successor without steering")
	}
}

// TestOpenUDPRefusesASecondAgent: SO_REUSEPORT on the set's UDP sockets
// does not let a second set (another agent) bind the same address.
func TestOpenUDPRefusesASecondAgent(t *testing.T) {
	a, k := openUDP(t)
	defer a.Close()
	b := NewSet()
	defer b.Close()
	if _, err := b.Open(context.Background(), []Key{k}); err == nil {
		t.Fatalf("a second set opened %s too", k)
	}
}
