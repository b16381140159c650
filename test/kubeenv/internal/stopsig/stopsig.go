package stopsig

import (
	"os"

	"golang.org/x/sys/unix"
)

// Signals are the catchable signals whose default action ends the process
// and that a user or a CI runner sends to stop a test run: SIGINT (Ctrl-C),
// SIGTERM (CI cancellation, timeout wrappers) and SIGHUP (terminal closed).
var Signals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP}
