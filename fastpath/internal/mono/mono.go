// Package mono reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns, so
// user space can tell how long ago the program stamped a map entry.
package mono

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC as a duration since boot.
func Now() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
