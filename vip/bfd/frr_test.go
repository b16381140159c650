package bfd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FRR programs, from the Debian package frr.
const (
	bfddCmd  = "/usr/lib/frr/bfdd"
	vtyshCmd = "/usr/bin/vtysh"
)

// frrBFDD is FRR's bfdd running in a test namespace, with every path it
// uses (config, pid file, vty socket directory, zebra and control sockets)
// in a directory of its own, so that it touches nothing of a system FRR.
// It runs without zebra: single-hop peers not tied to an interface need
// none.
type frrBFDD struct {
	t   *testing.T
	ns  *testNS
	dir string
	cmd *exec.Cmd
	log *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBFDD starts bfdd in the foreground as a child of the test, killed by
// its pid in t.Cleanup (before the namespace goes, as cleanups run last
// first). Its log is printed when the test fails.
func startBFDD(t *testing.T, ns *testNS) *frrBFDD {
	t.Helper()
	requireTool(t, bfddCmd, "frr")
	requireTool(t, vtyshCmd, "frr")
	// bfdd drops privileges to the frr user, which must be able to create
	// its sockets in the directory.
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("user frr is missing (%v): install the Debian package frr, e.g. by running hack/install-deps.sh as root", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", ns.name+"-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	conf := filepath.Join(dir, "bfdd.conf")
	if err := os.WriteFile(conf, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, conf} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &frrBFDD{t: t, ns: ns, dir: dir, log: &syncBuffer{}}
	f.cmd = exec.Command(ipCmd, "netns", "exec", ns.name, bfddCmd,
		"-f", conf,
		"-i", filepath.Join(dir, "bfdd.pid"),
		"--vty_socket", dir,
		"-z", filepath.Join(dir, "zserv.api"),
		"--bfdctl", filepath.Join(dir, "bfdd.sock"),
		"-P", "0", // no vty TCP port
		"--log", "stdout",
	)
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start bfdd: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = f.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = f.cmd.Process.Kill() // by pid: ip netns exec execs bfdd itself
		<-exited
		if t.Failed() {
			t.Logf("bfdd log:\n%s", f.log.String())
		}
	})
	eventually(t, "bfdd's vty socket", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("bfdd exited: %v\n%s", f.cmd.ProcessState, f.log.String())
		default:
		}
		_, err := os.Stat(filepath.Join(dir, "bfdd.vty"))
		return err == nil, fmt.Sprint(err)
	})
	return f
}

// vtysh runs vtysh against this bfdd's vty socket, one -c per command.
func (f *frrBFDD) vtysh(cmds ...string) string {
	f.t.Helper()
	args := []string{"--vty_socket", f.dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command(vtyshCmd, args...).CombinedOutput()
	if err != nil {
		f.t.Fatalf("vtysh %q: %v: %s", cmds, err, out)
	}
	return string(out)
}

// frrPeer is one entry of `show bfd peers json`.
type frrPeer struct {
	Peer                   string `json:"peer"`
	Local                  string `json:"local"`
	ID                     uint32 `json:"id"`
	RemoteID               uint32 `json:"remote-id"`
	Status                 string `json:"status"`
	Diagnostic             string `json:"diagnostic"`
	RemoteDiagnostic       string `json:"remote-diagnostic"`
	ReceiveInterval        int    `json:"receive-interval"`
	TransmitInterval       int    `json:"transmit-interval"`
	DetectMultiplier       int    `json:"detect-multiplier"`
	RemoteReceiveInterval  int    `json:"remote-receive-interval"`
	RemoteTransmitInterval int    `json:"remote-transmit-interval"`
	RemoteDetectMultiplier int    `json:"remote-detect-multiplier"`
}

func (f *frrBFDD) peers() map[string]frrPeer {
	f.t.Helper()
	out := f.vtysh("show bfd peers json")
	var list []frrPeer
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		f.t.Fatalf("parse show bfd peers json: %v: %s", err, out)
	}
	m := make(map[string]frrPeer)
	for _, p := range list {
		m[p.Peer] = p
	}
	return m
}

// waitPeer polls FRR's view of peer until cond holds.
func (f *frrBFDD) waitPeer(peer string, what string, cond func(frrPeer) bool) frrPeer {
	f.t.Helper()
	var p frrPeer
	eventually(f.t, "FRR: "+peer+" "+what, func() (bool, string) {
		var ok bool
		p, ok = f.peers()[peer]
		return ok && cond(p), fmt.Sprintf("%+v", p)
	})
	return p
}

// TestFRRInterop runs sessions between a Go speaker and FRR's bfdd, over
// IPv4 and IPv6 on a veth pair between two namespaces, at 3 x 300ms: both
// sides come Up with the asked timers; silencing the Go side makes FRR
// declare it down with "control detection time expired"; silencing FRR
// takes the Go side Down with diag 1; timer changes go through Poll/Final in
// both directions; removal reaches FRR as administratively down.
func TestFRRInterop(t *testing.T) {
	goNS, frrNS := newTestNS(t), newTestNS(t)
	link(t, goNS, "bfd-go", []string{"10.78.0.1/24", "fd78::1/64"}, frrNS, "bfd-frr", []string{"10.78.0.2/24", "fd78::2/64"})
	frr := startBFDD(t, frrNS)
	// One BFD speaker per namespace: ours refuses to start next to bfdd.
	if err := frrNS.do(t, func() error {
		sp, err := NewSpeaker(Options{})
		if err == nil {
			_ = sp.Close()
		}
		return err
	}); err == nil || !strings.Contains(err.Error(), "taken by another BFD speaker") {
		t.Errorf("NewSpeaker next to bfdd: %v, want an error saying port 3784 is taken", err)
	}
	frr.vtysh("configure", "bfd",
		"peer 10.78.0.1 local-address 10.78.0.2", "detect-multiplier 3", "receive-interval 300", "transmit-interval 300", "exit",
		"peer fd78::1 local-address fd78::2", "detect-multiplier 3", "receive-interval 300", "transmit-interval 300", "exit")

	sp := goNS.startSpeaker(t, Options{})
	events := watch(t, sp)
	addr := netip.MustParseAddr
	sessions := []struct {
		peer string
		key  SessionKey
	}{
		{"10.78.0.2", goNS.addSession(t, sp, SessionConfig{Peer: addr("10.78.0.2"), Local: addr("10.78.0.1"), Interface: "bfd-go",
			DetectMultiplier: 3, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond})},
		{"fd78::2", goNS.addSession(t, sp, SessionConfig{Peer: addr("fd78::2"), Local: addr("fd78::1"),
			DetectMultiplier: 3, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond})},
	}
	// FRR's name for us is our address.
	frrName := map[string]string{"10.78.0.2": "10.78.0.1", "fd78::2": "fd78::1"}

	bothUp := func(t *testing.T) {
		t.Helper()
		for _, s := range sessions {
			events.until(s.key, StateUp)
			st, _ := sp.Session(s.key)
			frr.waitPeer(frrName[s.peer], "up with our discriminators", func(p frrPeer) bool {
				return p.Status == "up" && p.RemoteID == st.LocalDiscriminator && p.ID == st.RemoteDiscriminator
			})
		}
	}

	t.Run("up with the asked timers", func(t *testing.T) {
		bothUp(t)
		for _, s := range sessions {
			p := frr.waitPeer(frrName[s.peer], "timers settle at 300ms", func(p frrPeer) bool {
				return p.RemoteTransmitInterval == 300 && p.RemoteReceiveInterval == 300
			})
			if p.ReceiveInterval != 300 || p.TransmitInterval != 300 || p.DetectMultiplier != 3 || p.RemoteDetectMultiplier != 3 {
				t.Errorf("FRR's view of %s: %+v, want 300/300 x 3 on both sides", frrName[s.peer], p)
			}
			eventually(t, s.peer+" poll done", func() (bool, string) {
				st, _ := sp.Session(s.key)
				return !st.Polling, "still polling"
			})
			st, _ := sp.Session(s.key)
			if st.TxInterval != 300*time.Millisecond || st.RxInterval != 300*time.Millisecond || st.DetectionTime != 900*time.Millisecond {
				t.Errorf("our view of %s: tx %v rx %v detection %v, want 300ms, 300ms, 900ms", s.peer, st.TxInterval, st.RxInterval, st.DetectionTime)
			}
		}
	})

	t.Run("silenced Go side is declared down by FRR", func(t *testing.T) {
		unsilence := goNS.silence(t)
		for _, s := range sessions {
			p := frr.waitPeer(frrName[s.peer], "down", func(p frrPeer) bool { return p.Status == "down" })
			if p.Diagnostic != "control detection time expired" {
				t.Errorf("FRR: %s down with %q, want control detection time expired", frrName[s.peer], p.Diagnostic)
			}
			// FRR tells us through the silence's one-way hole: its packets
			// still arrive, now saying Down.
			if ev := events.until(s.key, StateDown); ev.Diag != DiagNeighborDown {
				t.Errorf("%s: we went Down with %v, want neighbor signaled down", s.peer, ev.Diag)
			}
		}
		unsilence()
		bothUp(t)
	})

	t.Run("silenced FRR is declared down by the Go side", func(t *testing.T) {
		unsilence := frrNS.silence(t)
		for _, s := range sessions {
			ev := events.until(s.key, StateDown)
			if ev.Diag != DiagControlDetectionExpired {
				t.Errorf("%s: we went Down with %v, want control detection time expired", s.peer, ev.Diag)
			}
			if st, _ := sp.Session(s.key); ev.At.Sub(st.LastReceived) < 900*time.Millisecond {
				t.Errorf("%s: Down %v after FRR's last packet, before the 900ms detection time", s.peer, ev.At.Sub(st.LastReceived))
			}
			// Our detection timeout forgets FRR's discriminator (RFC 5880
			// §6.8.1), so our Down carries Your Discriminator 0, which FRR
			// ignores while its session is Up (its guard against a stray
			// packet overriding a good session): FRR goes down on its own
			// timeout, not on our word.
			p := frr.waitPeer(frrName[s.peer], "down", func(p frrPeer) bool { return p.Status == "down" })
			if p.Diagnostic != "control detection time expired" {
				t.Errorf("FRR: %s down with %q, want control detection time expired", frrName[s.peer], p.Diagnostic)
			}
		}
		unsilence()
		bothUp(t)
	})

	t.Run("timer changes through poll and final", func(t *testing.T) {
		s := sessions[0]
		// Ours: send every 600ms. FRR must learn it and answer the poll.
		st, _ := sp.Session(s.key)
		cfg := st.Config
		cfg.DesiredMinTx = 600 * time.Millisecond
		if err := sp.UpdateSession(cfg); err != nil {
			t.Fatal(err)
		}
		frr.waitPeer(frrName[s.peer], "sees our 600ms", func(p frrPeer) bool { return p.RemoteTransmitInterval == 600 })
		eventually(t, "our poll ends at 600ms", func() (bool, string) {
			st, _ := sp.Session(s.key)
			return !st.Polling && st.TxInterval == 600*time.Millisecond, fmt.Sprintf("polling %v, tx %v", st.Polling, st.TxInterval)
		})
		// FRR's: it sends every 400ms and accepts no faster than 700ms; we
		// answer its poll and follow.
		frr.vtysh("configure", "bfd", "peer 10.78.0.1 local-address 10.78.0.2", "transmit-interval 400", "receive-interval 700")
		eventually(t, "we follow FRR's timers", func() (bool, string) {
			st, _ := sp.Session(s.key)
			ok := st.RemoteDesiredMinTx == 400*time.Millisecond && st.RemoteRequiredMinRx == 700*time.Millisecond &&
				st.TxInterval == 700*time.Millisecond && st.RxInterval == 400*time.Millisecond && st.DetectionTime == 1200*time.Millisecond
			return ok, fmt.Sprintf("remote tx %v rx %v, our tx %v rx %v detection %v",
				st.RemoteDesiredMinTx, st.RemoteRequiredMinRx, st.TxInterval, st.RxInterval, st.DetectionTime)
		})
		frr.waitPeer(frrName[s.peer], "its poll answered", func(p frrPeer) bool {
			return p.TransmitInterval == 400 && p.ReceiveInterval == 700 && p.Status == "up"
		})
		if st, _ := sp.Session(s.key); st.State != StateUp || st.Counters.Downs != 2 {
			t.Errorf("after the timer changes: %v with %d downs, want Up and no new down", st.State, st.Counters.Downs)
		}
	})

	t.Run("removal reaches FRR as admin down", func(t *testing.T) {
		s := sessions[1]
		if err := sp.RemoveSession(s.key); err != nil {
			t.Fatal(err)
		}
		p := frr.waitPeer(frrName[s.peer], "down", func(p frrPeer) bool { return p.Status == "down" })
		if p.RemoteDiagnostic != "administratively down" {
			t.Errorf("FRR: %s down with remote diagnostic %q, want administratively down", frrName[s.peer], p.RemoteDiagnostic)
		}
		if strings.Contains(p.Diagnostic, "detection") {
			t.Errorf("FRR: %s down with %q: it waited for the timeout instead of hearing AdminDown", frrName[s.peer], p.Diagnostic)
		}
	})
}
