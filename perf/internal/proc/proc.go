package proc

import (
	"os"

	"golang.org/x/sys/unix"
)

// Terminate sends p SIGTERM, the signal on which the programs the harnesses
// start (nginx, HAProxy, novaedge-agent) shut down cleanly.
func Terminate(p *os.Process) error {
	return p.Signal(unix.SIGTERM)
}
