// Package termsig names the signals that ask a NovaEdge process to stop.
// It exists so that commands need not import syscall themselves.
package termsig

import (
	"os"
	"syscall"
)

// Shutdown are SIGINT and SIGTERM.
var Shutdown = []os.Signal{os.Interrupt, syscall.SIGTERM}
