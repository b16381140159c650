// Package mono reads the monotonic clock alone.
//
// time.Now reads the wall clock and the monotonic clock, two vDSO calls;
// deadlines and intervals need only the second. On the hosts perf/httpbench
// runs on, clock reads were a fifth of the slow path's user time outside
// system calls under small requests (about 18 vDSO calls per proxied
// HTTP/1.1 request), so the request path reads the monotonic clock where
// that is all it needs.
package mono

import "time"

// epoch is the origin of every reading; it carries a monotonic reading,
// so Since and Add below use the monotonic clock only.
var epoch = time.Now()

// Now returns the monotonic time since the process started (one vDSO call).
func Now() time.Duration { return time.Since(epoch) }

// Time returns the time.Time of the reading d, for deadlines: it carries a
// monotonic reading, so a deadline set from it follows the monotonic clock
// as one from time.Now does.
func Time(d time.Duration) time.Time { return epoch.Add(d) }
