package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// The program reads the time as bpf_jiffies64() * tick_ns + tick_offset_ns
// (see bpf/fastpath.bpf.c): CLOCK_MONOTONIC nanoseconds to the last timer
// tick, the same as bpf_ktime_get_coarse_ns but without a helper call. The
// kernel advances jiffies by one and its record of the tick's
// CLOCK_MONOTONIC time by exactly TICK_NSEC together, so the two constants
// hold from boot on; they are measured here once per process with the
// novaedge_clock program, which returns both clocks.

// tickClock maps jiffies to CLOCK_MONOTONIC nanoseconds: ns = jiffies *
// tickNS + offsetNS, in 64-bit wrapping arithmetic (jiffies start near 2^32
// at boot, so the offset is "negative").
type tickClock struct {
	tickNS, offsetNS uint64
}

// tickRates are the CONFIG_HZ values Linux architectures offer; the measured
// tick period is snapped to the nearest one.
var tickRates = []uint64{24, 32, 48, 64, 100, 128, 200, 250, 256, 300, 500, 512, 1000, 1024, 1200}

// hzOf returns the tick rate whose period is nearest to period, and false
// when none is within 1 % of it (not a tick: the measurement went wrong).
func hzOf(period time.Duration) (uint64, bool) {
	if period <= 0 {
		return 0, false
	}
	best, bestErr := uint64(0), math.Inf(1)
	for _, hz := range tickRates {
		e := math.Abs(float64(period)*float64(hz)/1e9 - 1)
		if e < bestErr {
			best, bestErr = hz, e
		}
	}
	return best, bestErr <= 0.01
}

// tickNSOf is the kernel's TICK_NSEC for a tick rate: the nanoseconds of
// CLOCK_MONOTONIC that one jiffy stands for.
func tickNSOf(hz uint64) uint64 { return (1e9 + hz/2) / hz }

// clockSample is one run of novaedge_clock: jiffies, then CLOCK_MONOTONIC.
type clockSample struct{ jiffies, mono uint64 }

// Measuring the tick period: two jiffies increments are timed, each between
// two samples at most maxEdgeGap apart, at least minSpan apart.
const (
	maxEdgeGap = 100 * time.Microsecond
	// minSpan is long enough that a tick the kernel takes late (a timer
	// interrupt delayed on a busy virtual machine, by up to a few
	// milliseconds) moves the measured period by well under 1 %.
	minSpan = 200 * time.Millisecond
	// clockTries bounds the attempts on a machine too loaded to give
	// samples that close together.
	clockTries = 5
)

// errNoTick is returned when no clean tick could be timed, errOffTick
// when the timed period is no kernel tick rate's (a tick taken late on a
// loaded machine); both are tried again, up to clockTries times.
var (
	errNoTick  = errors.New("no jiffies increment could be timed")
	errOffTick = errors.New("no kernel tick rate's period")
)

// kernelClock measures the mapping once per process (it never changes).
var kernelClock = sync.OnceValues(measureClock)

func measureClock() (tickClock, error) {
	spec, err := fastpathbpf.LoadFastpath()
	if err != nil {
		return tickClock{}, fmt.Errorf("parse fast path object: %w", err)
	}
	prog, err := ebpf.NewProgram(spec.Programs[fastpathbpf.FastpathProgNovaedgeClock])
	if err != nil {
		return tickClock{}, fmt.Errorf("load %s: %w", fastpathbpf.FastpathProgNovaedgeClock, err)
	}
	defer func() { _ = prog.Close() }()
	in, out := make([]byte, 64), make([]byte, 64)
	read := func() (clockSample, error) {
		ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
		if err != nil {
			return clockSample{}, fmt.Errorf("run %s: %w", fastpathbpf.FastpathProgNovaedgeClock, err)
		}
		if ret != 2 { // XDP_PASS
			return clockSample{}, fmt.Errorf("run %s: verdict %d", fastpathbpf.FastpathProgNovaedgeClock, ret)
		}
		return clockSample{binary.NativeEndian.Uint64(out[0:]), binary.NativeEndian.Uint64(out[8:])}, nil
	}
	// edge polls until jiffies advance between two samples close together
	// and returns the later one (taken just after the tick), or the
	// samples seen when a tick went by unseen for too long.
	edge := func(seen *[]clockSample) (clockSample, error) {
		prev, err := read()
		if err != nil {
			return clockSample{}, err
		}
		*seen = append(*seen, prev)
		deadline := prev.mono + uint64(time.Second)
		for {
			s, err := read()
			if err != nil {
				return clockSample{}, err
			}
			*seen = append(*seen, s)
			if s.jiffies != prev.jiffies && s.mono-prev.mono <= uint64(maxEdgeGap) {
				return s, nil
			}
			if s.mono > deadline {
				return clockSample{}, errNoTick
			}
			prev = s
		}
	}
	var lastErr error
	for range clockTries {
		var seen []clockSample
		a, err := edge(&seen)
		if err == nil {
			time.Sleep(minSpan)
			var b clockSample
			if b, err = edge(&seen); err == nil {
				var c tickClock
				if c, err = fitClock(a, b, seen); err == nil {
					return c, nil
				}
			}
		}
		if !errors.Is(err, errNoTick) && !errors.Is(err, errOffTick) {
			return tickClock{}, err
		}
		lastErr = err
	}
	return tickClock{}, lastErr
}

// fitClock derives the mapping from two samples taken just after a tick
// (a before b) and all samples seen: the period from a to b, snapped to a
// tick rate, and the offset that puts every sample's jiffies at or before
// its CLOCK_MONOTONIC time, as close as they come (the tick's time).
func fitClock(a, b clockSample, seen []clockSample) (tickClock, error) {
	if b.jiffies <= a.jiffies || b.mono <= a.mono {
		return tickClock{}, fmt.Errorf("%w: jiffies %d at %d ns, then %d at %d ns", errNoTick, a.jiffies, a.mono, b.jiffies, b.mono)
	}
	period := time.Duration((b.mono - a.mono) / (b.jiffies - a.jiffies))
	hz, ok := hzOf(period)
	if !ok {
		return tickClock{}, fmt.Errorf("%w: a jiffy lasted %v", errOffTick, period)
	}
	c := tickClock{tickNS: tickNSOf(hz)}
	// Wrapping differences: the offset is the smallest mono - jiffies*tick.
	c.offsetNS = seen[0].mono - seen[0].jiffies*c.tickNS
	for _, s := range seen[1:] {
		if o := s.mono - s.jiffies*c.tickNS; int64(o-c.offsetNS) < 0 {
			c.offsetNS = o
		}
	}
	return c, nil
}

// setClock sets the program's clock constants in spec. A machine too busy
// to time a tick leaves them 0: the program then reads
// bpf_ktime_get_coarse_ns, the same time at a higher cost per packet.
func setClock(spec *ebpf.CollectionSpec) error {
	c, err := kernelClock()
	if err != nil && !errors.Is(err, errNoTick) {
		return fmt.Errorf("measure the kernel's tick: %w", err)
	}
	if err := spec.Variables[fastpathbpf.FastpathVarTickNs].Set(c.tickNS); err != nil {
		return fmt.Errorf("set tick_ns: %w", err)
	}
	if err := spec.Variables[fastpathbpf.FastpathVarTickOffsetNs].Set(c.offsetNS); err != nil {
		return fmt.Errorf("set tick_offset_ns: %w", err)
	}
	return nil
}
