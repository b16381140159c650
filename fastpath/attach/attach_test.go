package attach

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

func TestSupported(t *testing.T) {
	requireRoot(t)
	if err := Supported(); err != nil {
		t.Fatalf("Supported() = %v on a kernel with XDP links", err)
	}
}

func TestAttachModes(t *testing.T) {
	tests := []struct {
		name         string
		mode         Mode
		bridge       bool // attach to a bridge, which has no native XDP
		wantMode     Mode
		wantFallback bool
		wantErr      bool
	}{
		{name: "auto on veth is native", mode: ModeAuto, wantMode: ModeNative},
		{name: "native on veth", mode: ModeNative, wantMode: ModeNative},
		{name: "generic forced on veth", mode: ModeGeneric, wantMode: ModeGeneric},
		{name: "auto falls back to generic", mode: ModeAuto, bridge: true, wantMode: ModeGeneric, wantFallback: true},
		{name: "native refused fails", mode: ModeNative, bridge: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t)
			root := pinRoot(t, p.b)
			tgt := p.b.target(t, p.nameB)
			if tc.bridge {
				// Resolve refuses bridges; a hand-built Target reaches
				// Adopt, which is what this case tests.
				br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "fpat-br"}}
				if err := p.b.h.LinkAdd(br); err != nil {
					t.Fatalf("create bridge: %v", err)
				}
				l := p.b.link(t, "fpat-br")
				tgt = Target{Requested: []string{"fpat-br"}, Ifname: "fpat-br", Ifindex: l.Attrs().Index, Reasons: []string{"test"}}
			}
			a := newAttacher(t, Options{Root: root, Mode: tc.mode})
			prog := passProg(t)

			var res *Result
			err := p.b.run(func() error {
				var err error
				res, err = a.Adopt(prog, []Target{tgt})
				return err
			})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Adopt succeeded in %s mode on a bridge", tc.mode)
				}
				if exists(a.PinPath(tgt.Ifname)) {
					t.Error("failed attach left a pin behind")
				}
				if id, _ := p.b.xdpOn(t, tgt.Ifname); id != 0 {
					t.Errorf("failed attach left program %d on the interface", id)
				}
				return
			}
			if err != nil {
				t.Fatalf("Adopt: %v", err)
			}
			out := res.Interfaces[0]
			if out.Action != ActionAttached || out.Mode != tc.wantMode {
				t.Errorf("outcome: action %s mode %s, want attached %s", out.Action, out.Mode, tc.wantMode)
			}
			if (out.Fallback != nil) != tc.wantFallback {
				t.Errorf("fallback error = %v, want one: %v", out.Fallback, tc.wantFallback)
			}
			id, mode := p.b.xdpOn(t, tgt.Ifname)
			if id != progID(t, prog) || mode != tc.wantMode {
				t.Errorf("netlink: program %d in %s mode, want %d in %s mode", id, mode, progID(t, prog), tc.wantMode)
			}
			if out.Pin != root+"/v1/links/"+tgt.Ifname || !exists(out.Pin) {
				t.Errorf("pin %s missing or misplaced", out.Pin)
			}
			st := list(t, p.b, root)
			if len(st) != 1 || !st[0].Attached || st[0].Mode != tc.wantMode || st[0].Ifname != tgt.Ifname ||
				st[0].Ifindex != tgt.Ifindex || uint32(st[0].ProgramID) != id || st[0].ProgramName != "test_pass" ||
				st[0].ProgramTag == "" || st[0].LinkID != out.LinkID || st[0].LayoutVersion != "v1" {
				t.Errorf("List = %+v, want the one attached link in %s mode", st, tc.wantMode)
			}
		})
	}
}

// TestPinSurvivesCloseAndAdoptUpdates is the agent restart: the first agent
// attaches a dropping program and exits; the link stays, still dropping; the
// second agent adopts it and swaps in a passing program, in the same link.
func TestPinSurvivesCloseAndAdoptUpdates(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	pr := p.prober(t)
	tgt := p.b.target(t, p.nameB)

	first, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	drop := dropProg(t)
	res := adopt(t, p.b, first, drop, tgt)
	linkID := res.Interfaces[0].LinkID
	dropID := progID(t, drop)
	// Every Go handle goes: the Attacher's links and the program.
	if err := first.Close(); err != nil {
		t.Fatalf("close attacher: %v", err)
	}
	if err := drop.Close(); err != nil {
		t.Fatal(err)
	}
	if id, _ := p.b.xdpOn(t, p.nameB); id != dropID {
		t.Fatalf("after closing all handles netlink shows program %d, want the dropping program %d", id, dropID)
	}
	dropped := pr.send1()

	second := newAttacher(t, Options{Root: root})
	pass := passProg(t)
	res = adopt(t, p.b, second, pass, tgt)
	out := res.Interfaces[0]
	if out.Action != ActionUpdated {
		t.Errorf("second agent: action %s, want updated", out.Action)
	}
	if out.LinkID != linkID {
		t.Errorf("link ID changed from %d to %d: the link was replaced, not updated", linkID, out.LinkID)
	}
	if id, _ := p.b.xdpOn(t, p.nameB); id != progID(t, pass) {
		t.Errorf("netlink shows program %d, want the passing program %d", id, progID(t, pass))
	}
	if early := pr.passes(); slices.Contains(early, dropped) {
		t.Errorf("datagram %d, sent while the dropping program was pinned with no handle open, was delivered", dropped)
	}
	if len(res.Unrequested) != 0 {
		t.Errorf("unrequested pins %v", res.Unrequested)
	}
}

// TestUpdateHasNoWindow swaps programs while datagrams flow and checks that
// every delivered datagram was seen by one of the two programs: a detach and
// re-attach would let some through unseen.
func TestUpdateHasNoWindow(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	pr := p.prober(t)
	tgt := p.b.target(t, p.nameB)

	counters, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	if err != nil {
		t.Fatalf("create counter map: %v", err)
	}
	t.Cleanup(func() { _ = counters.Close() })
	progA, progB := countingProg(t, counters, 0), countingProg(t, counters, 1)

	adopt(t, p.b, newAttacher(t, Options{Root: root}), progA, tgt)

	// The sender keeps at most inFlight datagrams unreceived (credits), so
	// the receive buffer never overflows and every datagram sent arrives.
	const inFlight = 32
	credits := make(chan struct{}, inFlight)
	for range inFlight {
		credits <- struct{}{}
	}
	rc := newRecvCounter()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 64)
		for {
			if err := pr.recv.SetReadDeadline(time.Now().Add(patience)); err != nil {
				rc.add(err)
				return
			}
			n, err := pr.recv.Read(buf)
			rc.add(err)
			if err != nil || string(buf[:n]) == "end" {
				return
			}
			credits <- struct{}{}
		}
	}()
	stop := make(chan struct{})
	sentCh := make(chan int64, 1)
	go func() {
		var n int64
		defer func() { sentCh <- n }()
		msg := []byte("x")
		for {
			select {
			case <-stop:
				// A last datagram tells the receiver to stop; it is
				// counted like the others.
				<-credits
				msg = []byte("end")
			case <-credits:
			}
			if _, err := pr.send.Write(msg); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			n++
			if string(msg) == "end" {
				return
			}
		}
	}()

	rc.waitFor(t, 1000) // traffic flows through program A
	res := adopt(t, p.b, newAttacher(t, Options{Root: root}), progB, tgt)
	if res.Interfaces[0].Action != ActionUpdated {
		t.Fatalf("action %s, want updated", res.Interfaces[0].Action)
	}
	rc.waitFor(t, rc.count()+1000) // and through program B
	close(stop)
	sent := <-sentCh
	// Every datagram sent arrives: waiting for a known count is no timeout.
	rc.waitFor(t, sent)
	<-recvDone

	var a, b uint64
	if err := counters.Lookup(uint32(0), &a); err != nil {
		t.Fatal(err)
	}
	if err := counters.Lookup(uint32(1), &b); err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d datagrams: %d seen by program A, %d by program B", sent, a, b)
	if a == 0 || b == 0 {
		t.Errorf("the swap did not happen mid-stream: A saw %d, B saw %d", a, b)
	}
	if a+b != uint64(sent) {
		t.Errorf("%d datagrams delivered but the programs saw %d: some passed with no program attached", sent, a+b)
	}
}

func TestStalePinReplaced(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	tgt := p.b.target(t, p.nameB)
	a := newAttacher(t, Options{Root: root})
	first := adopt(t, p.b, a, dropProg(t), tgt).Interfaces[0]
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	p.disconnect(t)
	p.connect(t)
	fresh := p.b.target(t, p.nameB)
	if fresh.Ifindex == tgt.Ifindex {
		t.Fatalf("recreated %s kept ifindex %d; the test needs a new one", p.nameB, tgt.Ifindex)
	}

	st := list(t, p.b, root)
	if len(st) != 1 || st[0].Attached || st[0].Ifindex != 0 || st[0].Problem == "" {
		t.Errorf("List after the interface was deleted = %+v, want one dead link with ifindex 0", st)
	}

	pr := p.prober(t)
	pass := passProg(t)
	out := adopt(t, p.b, newAttacher(t, Options{Root: root}), pass, fresh).Interfaces[0]
	if out.Action != ActionReplacedStale {
		t.Errorf("action %s, want replaced-stale", out.Action)
	}
	if out.LinkID == first.LinkID {
		t.Errorf("link %d reused for a recreated interface", out.LinkID)
	}
	if id, _ := p.b.xdpOn(t, p.nameB); id != progID(t, pass) {
		t.Errorf("netlink shows program %d, want %d", id, progID(t, pass))
	}
	pr.passes()
	st = list(t, p.b, root)
	if len(st) != 1 || !st[0].Attached || st[0].LinkID != out.LinkID || st[0].Ifindex != fresh.Ifindex {
		t.Errorf("List = %+v, want only the new link", st)
	}
}

func TestDetach(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	pr := p.prober(t)
	tgt := p.b.target(t, p.nameB)
	a := newAttacher(t, Options{Root: root})
	adopt(t, p.b, a, dropProg(t), tgt)
	dropped := pr.send1()

	p.b.must(t, "detach", func() error { return a.Detach(p.nameB) })
	if id, _ := p.b.xdpOn(t, p.nameB); id != 0 {
		t.Errorf("netlink still shows program %d after Detach", id)
	}
	if exists(a.PinPath(p.nameB)) {
		t.Error("pin left after Detach")
	}
	if st := list(t, p.b, root); len(st) != 0 {
		t.Errorf("List after Detach = %+v", st)
	}
	if early := pr.passes(); slices.Contains(early, dropped) {
		t.Errorf("datagram %d sent while the dropping program was attached was delivered", dropped)
	}
	err := p.b.run(func() error { return a.Detach(p.nameB) })
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second Detach = %v, want os.ErrNotExist", err)
	}
}

func TestDetachAll(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	// A second veth inside B, so two interfaces carry the program.
	if err := p.b.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fpat-c"}, PeerName: "fpat-d"}); err != nil {
		t.Fatalf("create second veth: %v", err)
	}
	for _, n := range []string{"fpat-c", "fpat-d"} {
		if err := p.b.h.LinkSetUp(p.b.link(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	v1 := newAttacher(t, Options{Root: root, LayoutVersion: "v1"})
	v2 := newAttacher(t, Options{Root: root, LayoutVersion: "v2", Mode: ModeGeneric})
	adopt(t, p.b, v1, passProg(t), p.b.target(t, p.nameB))
	adopt(t, p.b, v2, passProg(t), p.b.target(t, "fpat-c"))
	// Handles stay open in the Attachers: DetachAll must not depend on
	// being the last holder of a link.

	var done []Pin
	p.b.must(t, "detach all", func() error {
		var err error
		done, err = DetachAll(root)
		return err
	})
	if len(done) != 2 {
		t.Errorf("DetachAll removed %v, want 2 pins", done)
	}
	for _, n := range []string{p.nameB, "fpat-c"} {
		if id, _ := p.b.xdpOn(t, n); id != 0 {
			t.Errorf("netlink shows program %d on %s after DetachAll", id, n)
		}
	}
	if exists(root) {
		t.Errorf("pin root %s left after DetachAll", root)
	}
}

func TestLayoutVersions(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	if err := p.b.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fpat-c"}, PeerName: "fpat-d"}); err != nil {
		t.Fatalf("create second veth: %v", err)
	}
	b, c := p.b.target(t, p.nameB), p.b.target(t, "fpat-c")
	v1 := newAttacher(t, Options{Root: root, LayoutVersion: "v1"})
	v2 := newAttacher(t, Options{Root: root, LayoutVersion: "v2"})

	t.Run("separate directories", func(t *testing.T) {
		adopt(t, p.b, v1, passProg(t), b)
		res := adopt(t, p.b, v2, passProg(t), c)
		if !exists(root+"/v1/links/"+p.nameB) || !exists(root+"/v2/links/fpat-c") {
			t.Fatal("pins not under their layout versions")
		}
		if exists(root+"/v2/links/"+p.nameB) || exists(root+"/v1/links/fpat-c") {
			t.Fatal("pin in the other layout version")
		}
		want := []Pin{{LayoutVersion: "v1", Ifname: p.nameB, Path: root + "/v1/links/" + p.nameB}}
		if !slices.Equal(res.Unrequested, want) {
			t.Errorf("Unrequested = %v, want %v", res.Unrequested, want)
		}
		st := list(t, p.b, root)
		if len(st) != 2 || st[0].LayoutVersion != "v1" || st[1].LayoutVersion != "v2" || !st[0].Attached || !st[1].Attached {
			t.Errorf("List = %+v, want one live link per version", st)
		}
		p.b.must(t, "detach c via v2", func() error { return v2.Detach("fpat-c") })
		if id, _ := p.b.xdpOn(t, p.nameB); id == 0 {
			t.Error("detaching fpat-c in v2 took the program off fpat-b in v1")
		}
	})

	t.Run("migrated without detach", func(t *testing.T) {
		before := list(t, p.b, root)
		if len(before) != 1 || before[0].LayoutVersion != "v1" {
			t.Fatalf("setup: List = %+v", before)
		}
		pass := passProg(t)
		out := adopt(t, p.b, v2, pass, b).Interfaces[0]
		if out.Action != ActionMigrated || out.LinkID != before[0].LinkID {
			t.Errorf("outcome %s link %d, want migrated in link %d", out.Action, out.LinkID, before[0].LinkID)
		}
		if exists(root+"/v1/links/"+p.nameB) || !exists(root+"/v2/links/"+p.nameB) {
			t.Error("pin not moved from v1 to v2")
		}
		if id, _ := p.b.xdpOn(t, p.nameB); id != progID(t, pass) {
			t.Errorf("netlink shows program %d, want %d", id, progID(t, pass))
		}
	})
}

func TestModeChange(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	tgt := p.b.target(t, p.nameB)
	first := adopt(t, p.b, newAttacher(t, Options{Root: root, Mode: ModeGeneric}), passProg(t), tgt).Interfaces[0]

	// Auto accepts the mode in effect and keeps the link.
	out := adopt(t, p.b, newAttacher(t, Options{Root: root}), passProg(t), tgt).Interfaces[0]
	if out.Action != ActionUpdated || out.Mode != ModeGeneric || out.LinkID != first.LinkID {
		t.Errorf("auto over generic: %s in %s mode, link %d; want updated, generic, link %d", out.Action, out.Mode, out.LinkID, first.LinkID)
	}
	// An explicit other mode needs a new link.
	out = adopt(t, p.b, newAttacher(t, Options{Root: root, Mode: ModeNative}), passProg(t), tgt).Interfaces[0]
	if out.Action != ActionReattached || out.Mode != ModeNative || out.LinkID == first.LinkID || out.ReattachCause == nil {
		t.Errorf("native over generic: %s in %s mode, link %d, cause %v; want reattached, native, new link, a cause",
			out.Action, out.Mode, out.LinkID, out.ReattachCause)
	}
	if _, mode := p.b.xdpOn(t, p.nameB); mode != ModeNative {
		t.Errorf("netlink reports %s mode", mode)
	}
}

// TestForeignProgramLeftAlone checks that a program attached by someone else
// (here through the legacy netlink call) is reported, not replaced.
func TestForeignProgramLeftAlone(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	tgt := p.b.target(t, p.nameB)
	foreign := passProg(t)
	p.b.must(t, "legacy attach", func() error {
		l, err := netlink.LinkByName(p.nameB)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, foreign.FD(), nl.XDP_FLAGS_SKB_MODE)
	})
	t.Cleanup(func() {
		_ = p.b.run(func() error {
			l, err := netlink.LinkByName(p.nameB)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, -1, nl.XDP_FLAGS_SKB_MODE)
		})
	})
	a := newAttacher(t, Options{Root: root})
	drop := dropProg(t)
	err := p.b.run(func() error {
		_, err := a.Adopt(drop, []Target{tgt})
		return err
	})
	if !errors.Is(err, ErrBusy) {
		t.Errorf("Adopt over a foreign program = %v, want ErrBusy", err)
	}
	if id, _ := p.b.xdpOn(t, p.nameB); id != progID(t, foreign) {
		t.Errorf("netlink shows program %d, want the foreign %d untouched", id, progID(t, foreign))
	}
}

// TestUpdateRefusedReattaches checks that a program the kernel will not swap
// into the pinned link (another expected attach type) still ends up on the
// interface, through a new link.
func TestUpdateRefusedReattaches(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	tgt := p.b.target(t, p.nameB)
	first := adopt(t, p.b, newAttacher(t, Options{Root: root}), dropProg(t), tgt).Interfaces[0]

	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "test_pass_typed",
		Type:         ebpf.XDP,
		AttachType:   ebpf.AttachXDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
		License:      "Dual BSD/GPL",
	})
	if err != nil {
		t.Fatalf("load program with attach type: %v", err)
	}
	t.Cleanup(func() { _ = other.Close() })
	out := adopt(t, p.b, newAttacher(t, Options{Root: root}), other, tgt).Interfaces[0]
	if out.Action != ActionReattached || out.ReattachCause == nil || out.LinkID == first.LinkID {
		t.Errorf("outcome %s, cause %v, link %d; want reattached with a cause in a new link", out.Action, out.ReattachCause, out.LinkID)
	}
	if id, _ := p.b.xdpOn(t, p.nameB); id != progID(t, other) {
		t.Errorf("netlink shows program %d, want %d", id, progID(t, other))
	}
}

// TestFailedModeChangeRestores asks for native mode on a device without
// native XDP (a bridge) where the program runs in generic mode: the attach
// fails, and the program must be back in generic mode, not gone.
func TestFailedModeChangeRestores(t *testing.T) {
	p := newPair(t)
	root := pinRoot(t, p.b)
	if err := p.b.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "fpat-br"}}); err != nil {
		t.Fatalf("create bridge: %v", err)
	}
	br := Target{Requested: []string{"fpat-br"}, Ifname: "fpat-br", Ifindex: p.b.link(t, "fpat-br").Attrs().Index, Reasons: []string{"test"}}
	adopt(t, p.b, newAttacher(t, Options{Root: root, Mode: ModeGeneric}), passProg(t), br)

	native := newAttacher(t, Options{Root: root, Mode: ModeNative})
	drop := dropProg(t)
	err := p.b.run(func() error {
		_, err := native.Adopt(drop, []Target{br})
		return err
	})
	if err == nil {
		t.Fatal("native mode on a bridge succeeded")
	}
	t.Logf("Adopt: %v", err)
	if id, mode := p.b.xdpOn(t, "fpat-br"); id != progID(t, drop) || mode != ModeGeneric {
		t.Errorf("netlink shows program %d in %s mode, want %d restored in generic mode", id, mode, progID(t, drop))
	}
	if st := list(t, p.b, root); len(st) != 1 || !st[0].Attached {
		t.Errorf("List = %+v, want the restored link pinned", st)
	}
}
