package agent

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// umaskMu serialises umask changes: the umask is process-wide.
var umaskMu sync.Mutex

func listenUnixPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	umaskMu.Unlock()
	return ln, err
}
