package frr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// Router is a set of FRR daemons running in one namespace, sharing a
// directory for their files and sockets.
type Router struct {
	NS *NetNS
	// Dir holds the configuration files, pid files, the zserv socket and
	// the vty sockets (vtysh --vty_socket Dir).
	Dir  string
	logs map[string]*SyncBuffer
	// procs are the running daemons by name, for Restart.
	procs    map[string]*proc
	uid, gid int
	// owner is the test that started the router: daemons restarted from
	// a subtest still live until it ends.
	owner testing.TB
}

type proc struct {
	d      Daemon
	cmd    *exec.Cmd
	exited chan struct{}
}

// Daemon is one FRR daemon to start.
type Daemon struct {
	// Name of the daemon program in DaemonDir: "zebra", "bgpd", "bfdd", …
	Name string
	// Config is its startup configuration file's content.
	Config string
	// Args are extra arguments (e.g. "-p", "179" for bgpd's port).
	Args []string
}

// SyncBuffer collects a process's output; safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start starts the daemons in ns in order (zebra first when it is among
// them: the others connect to it), each in the foreground as a child of
// the test, waiting for each one's vty socket. They drop privileges to the
// frr user, as in production. t.Cleanup kills them by pid (before the
// namespace goes: cleanups run last first) and prints their logs when the
// test failed.
func Start(t testing.TB, ns *NetNS, daemons ...Daemon) *Router {
	t.Helper()
	RequireTool(t, VtyshCmd, "frr")
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("user frr is missing (%v): install the Debian package frr, e.g. by running hack/install-deps.sh as root", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", ns.Name+"-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Router{NS: ns, Dir: dir, logs: map[string]*SyncBuffer{}, procs: map[string]*proc{}, uid: uid, gid: gid, owner: t}
	for _, d := range daemons {
		r.start(t, d, uid, gid)
	}
	return r
}

func (r *Router) start(t testing.TB, d Daemon, uid, gid int) {
	t.Helper()
	bin := filepath.Join(DaemonDir, d.Name)
	RequireTool(t, bin, "frr")
	conf := filepath.Join(r.Dir, d.Name+".conf")
	if err := os.WriteFile(conf, []byte(d.Config), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(conf, uid, gid); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"-f", conf,
		"-i", filepath.Join(r.Dir, d.Name+".pid"),
		"--vty_socket", r.Dir,
		"-z", filepath.Join(r.Dir, "zserv.api"),
		"-P", "0", // no vty TCP port
		"--log", "stdout",
	}
	args = append(args, d.Args...)
	log := &SyncBuffer{}
	r.logs[d.Name] = log
	cmd := r.NS.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", d.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.procs[d.Name] = &proc{d: d, cmd: cmd, exited: exited}
	owner := r.owner
	owner.Cleanup(func() {
		_ = cmd.Process.Kill() // by pid: ip netns exec execs the daemon itself
		<-exited
		if owner.Failed() {
			owner.Logf("%s log:\n%s", d.Name, log.String())
		}
	})
	Eventually(t, d.Name+"'s vty socket", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("%s exited: %v\n%s", d.Name, cmd.ProcessState, log.String())
		default:
		}
		_, err := os.Stat(filepath.Join(r.Dir, d.Name+".vty"))
		return err == nil, fmt.Sprint(err)
	})
}

// Restart kills a daemon started by Start (by pid) and starts it again
// with its startup configuration, as a crash and restart would: whatever
// was configured through vtysh since is gone. Its log restarts too.
func (r *Router) Restart(t testing.TB, name string) {
	t.Helper()
	p := r.procs[name]
	if p == nil {
		t.Fatalf("restart %s: not started on this router", name)
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	// The socket of the dead daemon stays behind: wait for the new one's.
	_ = os.Remove(filepath.Join(r.Dir, name+".vty"))
	r.start(t, p.d, r.uid, r.gid)
}

// Vtysh runs vtysh against this router's daemons, one -c per command, and
// fails the test when vtysh fails.
func (r *Router) Vtysh(t testing.TB, cmds ...string) string {
	t.Helper()
	args := []string{"--vty_socket", r.Dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command(VtyshCmd, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("vtysh %q: %v: %s", cmds, err, out)
	}
	return string(out)
}

// JSON runs one show command (ending in "json") and decodes its output
// into v.
func (r *Router) JSON(t testing.TB, cmd string, v any) {
	t.Helper()
	out := r.Vtysh(t, cmd)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("vtysh %q: decode: %v: %s", cmd, err, out)
	}
}

// Log returns what a daemon has logged so far.
func (r *Router) Log(name string) string {
	if l := r.logs[name]; l != nil {
		return l.String()
	}
	return ""
}
