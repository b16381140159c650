// Package unixsys holds the agent's few direct system calls and signal
// numbers, kept in one small internal package as the repository's lint rules
// require.
package unixsys

import (
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ShutdownSignals stop the agent; ReloadSignal makes it re-read its files.
var (
	ShutdownSignals = []os.Signal{unix.SIGTERM, unix.SIGINT}
	ReloadSignal    = os.Signal(unix.SIGHUP)
)

// umaskMu serialises umask changes: the umask is process-wide.
var umaskMu sync.Mutex

// ListenUnixPrivate listens on a Unix socket created with mode 0600, so
// there is no moment at which another user could connect to it.
func ListenUnixPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := unix.Umask(0o177)
	defer unix.Umask(old)
	return net.Listen("unix", path)
}
