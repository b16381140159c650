package frr

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// BuildCommand builds the command package pkg (an import path, e.g.
// github.com/novaedge/novaedge/cmd/novaedge-agent) into the test's temporary
// directory and returns the binary's path.
func BuildCommand(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Do runs f on an OS thread inside the namespace; the sockets f opens stay
// there. The thread is never unlocked, so the runtime ends it with the
// goroutine instead of reusing a thread whose namespace changed.
func (n *NetNS) Do(t testing.TB, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(n.Name)
		if err != nil {
			done <- fmt.Errorf("open namespace %s: %w", n.Name, err)
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", n.Name, err)
			return
		}
		done <- f()
	}()
	if err := <-done; err != nil {
		t.Fatalf("in %s: %v", n.Name, err)
	}
}
