package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/novaedge/novaedge/perf/internal/proc"
)

// Programs used, by full path: sudo and go run environments may lack
// /usr/sbin in PATH.
const (
	ipCmd     = "/usr/sbin/ip"
	nftCmd    = "/usr/sbin/nft"
	vtyshCmd  = "/usr/bin/vtysh"
	daemonDir = "/usr/lib/frr"
)

// waitGuard bounds every wait for a network event so that a broken build
// ends the run instead of hanging it.
const waitGuard = 90 * time.Second

// env is one topology: the namespaces and processes it created, removed
// last first by close, by name or pid.
type env struct {
	cleanups []func()
}

func (e *env) onClose(f func()) { e.cleanups = append(e.cleanups, f) }

func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// netns creates a namespace named prefix and a random suffix with its
// loopback up.
func (e *env) netns(prefix string) (string, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + "-" + hex.EncodeToString(b[:])
	if _, err := run(ipCmd, "netns", "add", name); err != nil {
		return "", err
	}
	e.onClose(func() { _, _ = run(ipCmd, "netns", "del", name) })
	_, err := run(ipCmd, "-n", name, "link", "set", "lo", "up")
	return name, err
}

// bridged builds a segment: a bridge in a namespace of its own and one
// namespace per address, each on its eth0 with the address in a /24.
func (e *env) bridged(prefix string, addrs ...string) ([]string, error) {
	sw, err := e.netns(prefix + "sw")
	if err != nil {
		return nil, err
	}
	if _, err := run(ipCmd, "-n", sw, "link", "add", "br0", "type", "bridge"); err != nil {
		return nil, err
	}
	if _, err := run(ipCmd, "-n", sw, "link", "set", "br0", "up"); err != nil {
		return nil, err
	}
	var names []string
	for i, a := range addrs {
		ns, err := e.netns(fmt.Sprintf("%s%d", prefix, i))
		if err != nil {
			return nil, err
		}
		port := fmt.Sprintf("p%d", i)
		for _, args := range [][]string{
			{"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw},
			{"-n", ns, "addr", "add", a + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", sw, "link", "set", port, "master", "br0"},
			{"-n", sw, "link", "set", port, "up"},
		} {
			if _, err := run(ipCmd, args...); err != nil {
				return nil, err
			}
		}
		names = append(names, ns)
	}
	return names, nil
}

// syncBuffer collects a process's output.
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

// process is a program running in a namespace (ip netns exec execs it:
// the pid is the program's).
type process struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
}

func (e *env) start(ns, name string, args ...string) (*process, error) {
	p := &process{log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(ipCmd, append([]string{"netns", "exec", ns, name}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", name, ns, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	e.onClose(func() { p.stop() })
	return p, nil
}

// stop ends the process with SIGTERM, then SIGKILL after a while.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = proc.Terminate(p.cmd.Process)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *process) kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.exited
	return nil
}

// frrDaemon is one FRR daemon's name and startup configuration.
type frrDaemon struct {
	name, config string
	args         []string
}

// router is FRR's daemons in one namespace sharing a directory.
type router struct {
	ns, dir string
}

// startFRR starts daemons in ns (zebra first), as the frr user, each
// with its files and sockets in a directory of this run.
func (e *env) startFRR(ns string, daemons ...frrDaemon) (*router, error) {
	u, err := user.Lookup("frr")
	if err != nil {
		return nil, fmt.Errorf("user frr is missing (%w): install the Debian package frr (hack/install-deps.sh)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", ns+"-frr-")
	if err != nil {
		return nil, err
	}
	e.onClose(func() { _ = os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range daemons {
		conf := filepath.Join(dir, d.name+".conf")
		if err := os.WriteFile(conf, []byte(d.config), 0o640); err != nil {
			return nil, err
		}
		if err := os.Chown(conf, uid, gid); err != nil {
			return nil, err
		}
		args := append([]string{"-f", conf, "-i", filepath.Join(dir, d.name+".pid"), "--vty_socket", dir,
			"-z", filepath.Join(dir, "zserv.api"), "-P", "0", "--log", "stdout"}, d.args...)
		p, err := e.start(ns, filepath.Join(daemonDir, d.name), args...)
		if err != nil {
			return nil, err
		}
		err = eventually(d.name+"'s vty socket", func() (bool, string) {
			select {
			case <-p.exited:
				return false, "exited: " + p.log.String()
			default:
			}
			_, err := os.Stat(filepath.Join(dir, d.name+".vty"))
			return err == nil, fmt.Sprint(err)
		})
		if err != nil {
			return nil, err
		}
	}
	return &router{ns: ns, dir: dir}, nil
}

func (r *router) vtysh(cmd string) (string, error) {
	return run(vtyshCmd, "--vty_socket", r.dir, "-c", cmd)
}

// eventually polls cond every 20 ms until it holds or waitGuard passes.
func eventually(what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(waitGuard)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %v: %s", what, waitGuard, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// silenceTable is the nftables table that drops a node's packets.
const silenceTable = "novaedge_bench_silence"

// silence drops every IP packet ns sends or receives.
func silence(ns string) error {
	c := exec.Command(ipCmd, "netns", "exec", ns, nftCmd, "-f", "-")
	c.Stdin = strings.NewReader("table inet " + silenceTable + " {\n chain in {\n  type filter hook input priority 0; policy drop;\n }\n chain out {\n  type filter hook output priority 0; policy drop;\n }\n}\n")
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", ns, err, out)
	}
	return nil
}

func unsilence(ns string) error {
	_, err := run(ipCmd, "netns", "exec", ns, nftCmd, "delete", "table", "inet", silenceTable)
	return err
}
