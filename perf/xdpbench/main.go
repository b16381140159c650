package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/novaedge/novaedge/perf/xdpbench/bench"
	"github.com/novaedge/novaedge/perf/xdpbench/internal/sys"
	"github.com/novaedge/novaedge/perf/xdpbench/topo"
	"github.com/novaedge/novaedge/perf/xdpbench/traffic"
)

func main() {
	var (
		out      = flag.String("out", "perf/results", "directory for the report")
		duration = flag.Duration("duration", 5*time.Second, "measured time per case, profile and repetition")
		warmup   = flag.Duration("warmup", 500*time.Millisecond, "traffic before each measurement")
		reps     = flag.Int("reps", 3, "repetitions (the report gives the median)")
		cases    = flag.String("cases", caseNames(), "comma-separated cases")
		profiles = flag.String("traffic", strings.Join(bench.DefaultProfiles, ","), "comma-separated traffic profiles: "+profileNames())
		cpus     = flag.String("cpus", "", "comma-separated generator CPUs (default: all)")
		size     = flag.Int("size", traffic.MinFrame, "frame size in bytes, without FCS")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *out, bench.Options{
		Cases: split(*cases), Profiles: split(*profiles), Duration: *duration, Warmup: *warmup,
		Reps: *reps, FrameSize: *size, Logger: log,
	}, *cpus); err != nil {
		log.Error("xdpbench failed", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, out string, o bench.Options, cpus string) error {
	for _, f := range split(cpus) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("bad -cpus entry %q: %w", f, err)
		}
		o.CPUs = append(o.CPUs, n)
	}
	for _, p := range topo.StalePrefixes("xb-") {
		log.Warn("removing namespaces of a killed run", "prefix", p)
		if err := topo.Remove(p); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, sys.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print(bench.Markdown(rep))
	if rep.Interrupted {
		// Half a run does not belong among the results.
		return errors.New("interrupted: nothing written")
	}
	md, js, err := bench.Write(out, rep)
	if err != nil {
		return err
	}
	log.Info("report written", "markdown", md, "json", js)
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func caseNames() string {
	var n []string
	for _, c := range bench.Cases() {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

func profileNames() string {
	var n []string
	for _, p := range traffic.Profiles() {
		n = append(n, p.Name)
	}
	return strings.Join(n, ", ")
}
