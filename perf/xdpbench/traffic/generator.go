package traffic

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	benchbpf "github.com/novaedge/novaedge/gen/bpf/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/internal/sys"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
)

// SportSpan is the number of source ports per client address in a profile
// with many flows: flow i comes from port SportBase+i%SportSpan of address
// ClientBase+i/SportSpan.
const (
	SportSpan = 32768
	SportBase = 10000
)

// callTime is how long one BPF_PROG_TEST_RUN call should last: long enough
// that the syscall costs nothing, short enough that Stop is prompt.
const callTime = 50 * time.Millisecond

// GeneratorOptions configure a Generator.
type GeneratorOptions struct {
	// NS is the namespace whose interface Ifname sends the frames.
	NS, Ifname string
	// CPUs are the CPUs to run one generator thread on each; nil means
	// CPU 0 only.
	CPUs []int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// Generator sends frames out of a veth with BPF_PROG_TEST_RUN in
// live-frame mode, one pinned thread per CPU.
type Generator struct {
	opts  GeneratorOptions
	log   *slog.Logger
	objs  benchbpf.BenchgenObjects
	frame []byte

	stop atomic.Bool
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	tids []int
}

// NewGenerator loads the generator program. Configure it, then Start it.
func NewGenerator(opts GeneratorOptions) (*Generator, error) {
	if len(opts.CPUs) == 0 {
		opts.CPUs = []int{0}
	}
	g := &Generator{opts: opts, log: opts.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if err := benchbpf.LoadBenchgenObjects(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator program: %w", err)
	}
	return g, nil
}

// Configure sets what the generator sends: frame is flow 0 (see
// Frame.Bytes) and flows the number of flows to cycle through. It must not
// be called while the generator runs.
func (g *Generator) Configure(frame []byte, proto uint8, flows uint32) error {
	if len(frame) < MinFrame {
		return fmt.Errorf("frame of %d bytes is shorter than %d", len(frame), MinFrame)
	}
	var cfg benchbpf.BenchgenGenConfig
	copy(cfg.Head[:], frame)
	cfg.Flows = flows
	cfg.Cpus = uint32(len(g.opts.CPUs))
	cfg.SportSpan = SportSpan
	cfg.L4Proto = uint32(proto)
	if err := g.objs.GenCfg.Set(cfg); err != nil {
		return fmt.Errorf("set generator config: %w", err)
	}
	g.frame = frame
	return nil
}

// Start starts one sending thread per CPU; it returns at once.
func (g *Generator) Start() error {
	if g.frame == nil {
		return errors.New("generator is not configured")
	}
	g.stop.Store(false)
	g.errs, g.tids = nil, nil
	for _, cpu := range g.opts.CPUs {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := g.send(cpu); err != nil {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Errorf("generator on cpu %d: %w", cpu, err))
				g.mu.Unlock()
			}
		}()
	}
	return nil
}

// Stop stops the sending threads and returns their errors.
func (g *Generator) Stop() error {
	g.stop.Store(true)
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// Threads returns the thread ids of the sending threads started so far.
// The kernel charges them with the generator's work and with the NAPI
// processing it triggers on the same CPU (the node's and the sink's), unless
// that is deferred to ksoftirqd.
func (g *Generator) Threads() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.tids)
}

// Sent returns the frames handed to XDP_TX so far, over all CPUs.
func (g *Generator) Sent() (uint64, error) {
	var per []benchbpf.BenchgenGenStats
	if err := g.objs.GenCounts.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read generator counts: %w", err)
	}
	var n uint64
	for _, s := range per {
		n += s.Sent
	}
	return n, nil
}

// Close stops the generator and unloads its program.
func (g *Generator) Close() error {
	return errors.Join(g.Stop(), g.objs.Close())
}

// send runs the program on cpu until Stop, in calls of about callTime.
func (g *Generator) send(cpu int) error {
	return topo.Do(g.opts.NS, func() error {
		if err := sys.PinTask(0, cpu); err != nil {
			return err
		}
		tid := sys.Gettid()
		g.mu.Lock()
		g.tids = append(g.tids, tid)
		g.mu.Unlock()
		g.log.Debug("generator thread running", "cpu", cpu, "tid", tid, "ns", g.opts.NS)
		idx, err := ifindex(g.opts.Ifname)
		if err != nil {
			return err
		}
		opts := &ebpf.RunOptions{
			Data:   g.frame,
			Repeat: 1 << 14,
			Flags:  sys.LiveFrames,
			// The default batch (64 frames between flushes) stays well
			// inside a veth queue's 256-frame ring.
			Context: benchbpf.BenchgenXdpMd{
				DataEnd:        uint32(len(g.frame)),
				IngressIfindex: uint32(idx),
			},
		}
		for !g.stop.Load() {
			start := time.Now()
			if _, err := g.objs.BenchGen.Run(opts); err != nil {
				return fmt.Errorf("run live frames: %w", err)
			}
			// Aim the next call at callTime, changing by at most 4x.
			el := max(time.Since(start), time.Microsecond)
			next := float64(opts.Repeat) * float64(callTime) / float64(el)
			next = min(max(next, float64(opts.Repeat)/4), float64(opts.Repeat)*4)
			opts.Repeat = uint32(min(max(next, 64), 1<<26))
		}
		return nil
	})
}

func ifindex(name string) (int, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return 0, fmt.Errorf("interface %s: %w", name, err)
	}
	return iface.Index, nil
}
