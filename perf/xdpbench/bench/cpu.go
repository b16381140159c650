package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuClock sums the CPU time of the tasks that carry the traffic: the
// generator threads and the ksoftirqd threads of the generator CPUs. In
// this topology every frame is generated, forwarded by the node and counted
// by the sink on one CPU, in the generator thread's own context or, when
// the kernel defers softirqs, in that CPU's ksoftirqd; the CPU time of
// these tasks is therefore what the traffic cost, whatever else runs on a
// shared machine.
type cpuClock struct {
	ksoftirqd []int
}

func newCPUClock(cpus []int) (*cpuClock, error) {
	want := map[string]bool{}
	for _, c := range cpus {
		want["ksoftirqd/"+strconv.Itoa(c)] = true
	}
	c := &cpuClock{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && want[strings.TrimSpace(string(comm))] {
			c.ksoftirqd = append(c.ksoftirqd, pid)
		}
	}
	if len(c.ksoftirqd) != len(cpus) {
		return nil, fmt.Errorf("found %d ksoftirqd threads for %d CPUs", len(c.ksoftirqd), len(cpus))
	}
	return c, nil
}

// read returns the CPU time so far of the generator threads tids and the
// ksoftirqd threads.
func (c *cpuClock) read(tids []int) (time.Duration, error) {
	var total time.Duration
	for _, tid := range tids {
		d, err := schedstat(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
		if err != nil {
			return 0, err
		}
		total += d
	}
	for _, pid := range c.ksoftirqd {
		d, err := schedstat(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// schedstat returns the first field of a schedstat file: nanoseconds spent
// running on a CPU.
func schedstat(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("read cpu time: %s is empty", path)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read cpu time from %s: %w", path, err)
	}
	return time.Duration(ns), nil
}
