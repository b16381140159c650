package bench

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/novaedge/novaedge/perf/xdpbench/topo"
	"github.com/novaedge/novaedge/perf/xdpbench/traffic"
)

// Options configure Run.
type Options struct {
	// Prefix names the namespaces and links (Prefix+"gen", ...); at most
	// 14 bytes. Empty means "xb-<pid>-".
	Prefix string
	// Cases are the case names to run; nil means all of Cases().
	Cases []string
	// Profiles are the traffic profile names; nil means DefaultProfiles.
	Profiles []string
	// Duration is the measured time per case, profile and repetition;
	// 0 means 5s.
	Duration time.Duration
	// Warmup runs traffic before each measurement starts (caches,
	// conntrack entries); 0 means 500ms.
	Warmup time.Duration
	// Reps is the number of repetitions; the report gives the median. 0
	// means 3.
	Reps int
	// CPUs are the generator CPUs, one sending thread each; nil means all
	// CPUs the process may run on.
	CPUs []int
	// FrameSize is the length of each frame; 0 means traffic.MinFrame.
	FrameSize int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// DefaultProfiles are the traffic profiles run when none are given.
var DefaultProfiles = []string{"udp", "udp-1flow", "tcp-syn"}

// Measurement is one measured interval of one case under one profile.
type Measurement struct {
	Rep     int     `json:"rep"`
	Seconds float64 `json:"seconds"`
	// Sent counts the frames the generator handed to XDP_TX.
	Sent uint64 `json:"sent"`
	// Received counts forwarded frames at the sink, Other the rest.
	Received uint64  `json:"received"`
	Other    uint64  `json:"other"`
	PPS      float64 `json:"pps"`
	SentPPS  float64 `json:"sent_pps"`
	// CPUSeconds is the CPU time of the tasks carrying the traffic (see
	// cpuClock), CPUNsPerPacket that time per forwarded frame.
	CPUSeconds     float64 `json:"cpu_seconds"`
	CPUNsPerPacket float64 `json:"cpu_ns_per_packet"`
}

// Result is one case under one profile over all repetitions.
type Result struct {
	Case    string `json:"case"`
	Profile string `json:"profile"`
	// Status is "ok", "not yet wired" or "error: ...".
	Status string `json:"status"`
	// NodeXDP is the node veth's XDP attach mode during the case.
	NodeXDP string `json:"node_xdp,omitempty"`
	// PPS, SentPPS and CPUNsPerPacket are the medians over the
	// repetitions.
	PPS            float64 `json:"pps"`
	SentPPS        float64 `json:"sent_pps"`
	CPUNsPerPacket float64 `json:"cpu_ns_per_packet"`
	// VsTxMin and VsNftables are PPS divided by the same profile's PPS of
	// the xdp-tx-min and nftables cases; 0 when either is missing.
	VsTxMin    float64 `json:"ratio_vs_xdp_tx_min,omitempty"`
	VsNftables float64 `json:"ratio_vs_nftables,omitempty"`
	// CPUVsTxMin and CPUVsNftables compare CPU cost per packet the same
	// way (the reference's ns per packet divided by this case's, so that
	// higher is better, like a pps ratio): less exposed to other load on
	// a shared machine than PPS.
	CPUVsTxMin    float64 `json:"cpu_ratio_vs_xdp_tx_min,omitempty"`
	CPUVsNftables float64 `json:"cpu_ratio_vs_nftables,omitempty"`
	// ExtraNsVsTxMin is CPUNsPerPacket minus that of xdp-tx-min: what
	// this case's forwarding costs beyond the minimal NAT program.
	ExtraNsVsTxMin float64       `json:"extra_ns_vs_xdp_tx_min,omitempty"`
	Reps           []Measurement `json:"reps,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	Host      string `json:"host"`
	Kernel    string `json:"kernel"`
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	GoVersion string `json:"go"`
	// Generator says how traffic was generated.
	Generator string `json:"generator"`
	// Pktgen reports whether /proc/net/pktgen exists (kernel pktgen).
	Pktgen bool `json:"pktgen_available"`
	// GenXDP is the generator veth's XDP attach mode (the sink).
	GenXDP string `json:"gen_xdp"`
	// CPUClockCaveat, when set, says why CPU ns per packet may be wrong
	// on this kernel.
	CPUClockCaveat string `json:"cpu_clock_caveat,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	Stamp       string        `json:"stamp"`
	Machine     Machine       `json:"machine"`
	Duration    time.Duration `json:"duration_ns"`
	Warmup      time.Duration `json:"warmup_ns"`
	Reps        int           `json:"reps"`
	FrameSize   int           `json:"frame_size"`
	GenCPUs     []int         `json:"generator_cpus"`
	Profiles    []ProfileInfo `json:"profiles"`
	Cases       []CaseInfo    `json:"cases"`
	Results     []Result      `json:"results"`
	Interrupted bool          `json:"interrupted,omitempty"`
}

// ProfileInfo is a traffic profile as reported.
type ProfileInfo struct {
	Name  string `json:"name"`
	Flows uint32 `json:"flows"`
	Doc   string `json:"doc"`
}

// CaseInfo is a case as reported.
type CaseInfo struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
}

// Run builds the topology, measures every selected case under every
// selected profile Reps times and removes the topology again, also when ctx
// is cancelled (the report then holds what was measured, Interrupted set).
// Repetitions are interleaved (all cases, then all cases again) so that
// drift on a shared machine affects every case alike.
func Run(ctx context.Context, o Options) (_ *Report, err error) {
	o = o.withDefaults()
	log := o.Logger
	cases, err := SelectCases(o.Cases)
	if err != nil {
		return nil, err
	}
	var profiles []traffic.Profile
	for _, n := range o.Profiles {
		p, err := traffic.ProfileByName(n)
		if err != nil {
			return nil, err
		}
		profiles = append(profiles, p)
	}

	t, err := topo.Build(ctx, o.Prefix, log)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	sink, err := traffic.AttachSink(t.GenNS, t.GenIf)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sink.Close()) }()
	gen, err := traffic.NewGenerator(traffic.GeneratorOptions{NS: t.GenNS, Ifname: t.GenIf, CPUs: o.CPUs, Logger: log})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, gen.Close()) }()

	rep := &Report{
		Stamp: time.Now().UTC().Format("2006-01-02T150405Z"), Machine: machine(),
		Duration: o.Duration, Warmup: o.Warmup, Reps: o.Reps, FrameSize: o.FrameSize, GenCPUs: o.CPUs,
	}
	if rep.Machine.GenXDP, err = topo.XDPMode(t.GenNS, t.GenIf); err != nil {
		return nil, err
	}
	for _, p := range profiles {
		rep.Profiles = append(rep.Profiles, ProfileInfo{Name: p.Name, Flows: p.Flows, Doc: p.Doc})
	}
	results := map[[2]string]*Result{}
	for _, c := range cases {
		rep.Cases = append(rep.Cases, CaseInfo{Name: c.Name, Doc: c.Doc})
		for _, p := range profiles {
			r := &Result{Case: c.Name, Profile: p.Name, Status: "ok"}
			if c.Setup == nil {
				r.Status = StatusNotWired
			}
			results[[2]string{c.Name, p.Name}] = r
		}
	}

	clock, err := newCPUClock(o.CPUs)
	if err != nil {
		return nil, err
	}
	m := measurer{t: t, sink: sink, gen: gen, clock: clock, o: o, log: log}
	for i := 1; i <= o.Reps && ctx.Err() == nil; i++ {
		for _, p := range profiles {
			for _, c := range cases {
				r := results[[2]string{c.Name, p.Name}]
				if r.Status != "ok" || ctx.Err() != nil {
					continue
				}
				meas, mode, err := m.measure(ctx, c, p, i)
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					r.Status = "error: " + err.Error()
					log.Error("case failed", "case", c.Name, "profile", p.Name, "err", err)
					continue
				}
				r.NodeXDP = mode
				r.Reps = append(r.Reps, meas)
				log.Info("measured", "case", c.Name, "profile", p.Name, "rep", i,
					"pps", int64(meas.PPS), "sent_pps", int64(meas.SentPPS), "cpu_ns_per_packet", int64(meas.CPUNsPerPacket), "other", meas.Other)
			}
		}
	}
	rep.Interrupted = ctx.Err() != nil
	for _, p := range profiles {
		for _, c := range cases {
			r := results[[2]string{c.Name, p.Name}]
			r.PPS = median(r.Reps, func(m Measurement) float64 { return m.PPS })
			r.SentPPS = median(r.Reps, func(m Measurement) float64 { return m.SentPPS })
			r.CPUNsPerPacket = median(r.Reps, func(m Measurement) float64 { return m.CPUNsPerPacket })
		}
		txMin, nft := results[[2]string{CaseTxMin, p.Name}], results[[2]string{CaseNftables, p.Name}]
		for _, c := range cases {
			r := results[[2]string{c.Name, p.Name}]
			r.VsTxMin, r.CPUVsTxMin = ratios(r, txMin)
			r.VsNftables, r.CPUVsNftables = ratios(r, nft)
			if txMin != nil && txMin.CPUNsPerPacket > 0 && r.CPUNsPerPacket > 0 {
				r.ExtraNsVsTxMin = r.CPUNsPerPacket - txMin.CPUNsPerPacket
			}
			rep.Results = append(rep.Results, *r)
		}
	}
	return rep, nil
}

type measurer struct {
	t     *topo.Topology
	sink  *traffic.Sink
	gen   *traffic.Generator
	clock *cpuClock
	o     Options
	log   *slog.Logger
}

// measure sets the case up, runs the profile's traffic through a warm-up
// and then the measured interval, and tears the case down.
func (m *measurer) measure(ctx context.Context, c Case, p traffic.Profile, rep int) (_ Measurement, mode string, err error) {
	cleanup, err := c.Setup(ctx, m.t.NodeNS, m.t.NodeIf)
	if err != nil {
		return Measurement{}, "", fmt.Errorf("set up %s: %w", c.Name, err)
	}
	defer cleanup()
	if mode, err = topo.XDPMode(m.t.NodeNS, m.t.NodeIf); err != nil {
		return Measurement{}, "", err
	}
	frame, err := traffic.Frame{
		SrcMAC: m.t.GenMAC, DstMAC: m.t.NodeMAC,
		Src: topo.ClientBase, Dst: topo.VIP,
		SrcPort: traffic.SportBase, DstPort: topo.Port,
		Proto: p.Proto, TCPFlags: p.TCPFlags, Size: m.o.FrameSize,
	}.Bytes()
	if err != nil {
		return Measurement{}, "", err
	}
	if err := m.gen.Configure(frame, p.Proto, p.Flows); err != nil {
		return Measurement{}, "", err
	}
	if err := m.sink.Expect(c.Expect, topo.Port); err != nil {
		return Measurement{}, "", err
	}
	if err := m.gen.Start(); err != nil {
		return Measurement{}, "", err
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, m.gen.Stop())
		}
	}()
	if err := sleep(ctx, m.o.Warmup); err != nil {
		return Measurement{}, "", err
	}
	s0, err := m.snapshot()
	if err != nil {
		return Measurement{}, "", err
	}
	if err := sleep(ctx, m.o.Duration); err != nil {
		return Measurement{}, "", err
	}
	s1, err := m.snapshot()
	if err != nil {
		return Measurement{}, "", err
	}
	stopped = true
	if err := m.gen.Stop(); err != nil {
		return Measurement{}, "", err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	meas := Measurement{
		Rep: rep, Seconds: secs,
		Sent: s1.sent - s0.sent, Received: s1.recv.Matched - s0.recv.Matched, Other: s1.recv.Other - s0.recv.Other,
		CPUSeconds: (s1.cpu - s0.cpu).Seconds(),
	}
	meas.PPS = float64(meas.Received) / secs
	meas.SentPPS = float64(meas.Sent) / secs
	if meas.Received > 0 {
		meas.CPUNsPerPacket = meas.CPUSeconds * 1e9 / float64(meas.Received)
	}
	if meas.Received == 0 {
		return meas, mode, fmt.Errorf("the sink counted no forwarded frames (%d sent, %d other)", meas.Sent, meas.Other)
	}
	return meas, mode, nil
}

type snapshot struct {
	at   time.Time
	sent uint64
	recv traffic.SinkCounts
	cpu  time.Duration
}

// snapshot reads the counters and CPU clocks as close together in time as
// it can.
func (m *measurer) snapshot() (s snapshot, err error) {
	s.at = time.Now()
	if s.sent, err = m.gen.Sent(); err != nil {
		return s, err
	}
	if s.recv, err = m.sink.Counts(); err != nil {
		return s, err
	}
	s.cpu, err = m.clock.read(m.gen.Threads())
	return s, err
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("xb-%d-", os.Getpid())
	}
	if o.Cases == nil {
		for _, c := range Cases() {
			o.Cases = append(o.Cases, c.Name)
		}
	}
	if o.Profiles == nil {
		o.Profiles = DefaultProfiles
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 500 * time.Millisecond
	}
	if o.Reps == 0 {
		o.Reps = 3
	}
	if o.CPUs == nil {
		for i := range runtime.NumCPU() {
			o.CPUs = append(o.CPUs, i)
		}
	}
	if o.FrameSize == 0 {
		o.FrameSize = traffic.MinFrame
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func median(ms []Measurement, f func(Measurement) float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i] = f(m)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ratios compares r with ref by packet rate and by CPU cost per packet;
// 0 where either figure is missing.
func ratios(r, ref *Result) (pps, cpu float64) {
	if ref == nil {
		return 0, 0
	}
	if ref.PPS > 0 && r.PPS > 0 {
		pps = r.PPS / ref.PPS
	}
	if ref.CPUNsPerPacket > 0 && r.CPUNsPerPacket > 0 {
		cpu = ref.CPUNsPerPacket / r.CPUNsPerPacket
	}
	return pps, cpu
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Generator: "BPF_PROG_TEST_RUN live frames (BPF_F_TEST_XDP_LIVE_FRAMES)"}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if _, err := os.Stat("/proc/net/pktgen"); err == nil {
		m.Pktgen = true
	}
	m.CPUClockCaveat = irqTimeCaveat()
	return m
}

// irqTimeCaveat reads the kernel configuration: with
// CONFIG_IRQ_TIME_ACCOUNTING, softirq time is kept apart from the task it
// interrupted, and the CPU clock would leave out the NAPI work done in the
// generator threads.
func irqTimeCaveat() string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return "kernel configuration unreadable: if CONFIG_IRQ_TIME_ACCOUNTING=y, CPU ns/pkt leaves out softirq (NAPI) work"
	}
	defer func() { _ = f.Close() }()
	z, err := gzip.NewReader(f)
	if err != nil {
		return "kernel configuration unreadable: if CONFIG_IRQ_TIME_ACCOUNTING=y, CPU ns/pkt leaves out softirq (NAPI) work"
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if sc.Text() == "CONFIG_IRQ_TIME_ACCOUNTING=y" {
			return "CONFIG_IRQ_TIME_ACCOUNTING=y: CPU ns/pkt leaves out softirq (NAPI) work run in the generator threads; compare pps only"
		}
	}
	return ""
}
