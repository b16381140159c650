package sys

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// LiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: BPF_PROG_TEST_RUN of an XDP
// program then sends the frames for real (XDP_TX out of the ingress device,
// XDP_REDIRECT to the target) instead of returning them to user space.
const LiveFrames = unix.BPF_F_TEST_XDP_LIVE_FRAMES

// PinTask restricts the task tid (a thread or kernel thread; 0 is the
// calling thread) to cpu. The caller pinning itself must hold
// runtime.LockOSThread, or the Go scheduler moves it to another thread.
func PinTask(tid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("pin task %d to cpu %d: %w", tid, cpu, err)
	}
	return nil
}

// Gettid returns the calling thread's id, which the caller must hold with
// runtime.LockOSThread for the answer to stay true.
func Gettid() int {
	return unix.Gettid()
}

// SIGTERM is the signal on which the benchmark stops and cleans up, like
// on SIGINT.
const SIGTERM = unix.SIGTERM
