// Command splice measures the two ways the slow path can move the bytes of
// an L4-proxied TCP pair, side by side in one run: l4.Pipe (io.Copy, which
// uses splice(2) between two *net.TCPConn) and the sockmap Splicer (an
// sk_skb verdict program redirecting in the kernel). For several numbers of
// concurrent pairs it runs a bulk stream (clients send, an upstream echoes,
// clients read) and a 1 KiB request/response ping-pong, and records
// throughput and CPU. It writes a Markdown report to -out.
//
// Clients, proxy and echo upstreams share this process and 127.0.0.1, so
// CPU is counted for the whole machine (/proc/stat: the kernel's sockmap
// work queue runs in kworker threads, not in this process) and, separately,
// for this process; the two modes differ only in the proxy. Needs root
// (BPF). Only 127.0.0.1 is used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/slowpath/l4"
	"github.com/novaedge/novaedge/slowpath/l4/sockmap"
)

type result struct {
	workload string
	mode     string
	pairs    int
	// units moved during the window: bytes (stream) or round trips.
	units      float64
	seconds    float64
	systemCPU  float64 // CPU-seconds, all CPUs
	processCPU float64 // CPU-seconds, this process
}

func main() {
	var (
		out      = flag.String("out", "perf/results", "directory for the report")
		duration = flag.Duration("duration", 2*time.Second, "measurement window per case")
		pairList = flag.String("pairs", "1,16,64", "comma-separated numbers of concurrent pairs")
	)
	flag.Parse()
	log.SetFlags(0)
	var counts []int
	for _, f := range strings.Split(*pairList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-pairs: bad count %q", f)
		}
		counts = append(counts, n)
	}
	splicer, err := sockmap.New(sockmap.Options{})
	if err != nil {
		log.Fatalf("sockmap: %v", err)
	}
	defer func() { _ = splicer.Close() }()

	var results []result
	for _, w := range []string{"stream", "pingpong"} {
		for _, n := range counts {
			for _, mode := range []string{"l4.Pipe", "sockmap"} {
				r, err := run(w, mode, n, *duration, splicer)
				if err != nil {
					log.Fatalf("%s %s %d pairs: %v", w, mode, n, err)
				}
				results = append(results, r)
				log.Printf("%-8s %-8s %3d pairs: %s", w, mode, n, summary(r))
			}
		}
	}
	path, err := writeReport(*out, results, *duration)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", path)
}

func summary(r result) string {
	if r.workload == "stream" {
		return fmt.Sprintf("%8.1f MB/s  %6.3f CPU-s/GB (system)  %6.3f CPU-s/GB (process)",
			r.units/r.seconds/1e6, r.systemCPU/(r.units/1e9), r.processCPU/(r.units/1e9))
	}
	return fmt.Sprintf("%8.0f round trips/s  %6.1f µs CPU/rt (system)  %6.1f µs CPU/rt (process)",
		r.units/r.seconds, r.systemCPU/r.units*1e6, r.processCPU/r.units*1e6)
}

// run sets up n pairs client -> proxy (mode) -> echo upstream, lets them
// warm up, then measures for d.
func run(workload, mode string, n int, d time.Duration, splicer *sockmap.Splicer) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	upstream, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return result{}, err
	}
	defer func() { _ = upstream.Close() }()
	front, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return result{}, err
	}
	defer func() { _ = front.Close() }()

	wg.Go(func() { // echo upstream
		for {
			c, err := upstream.AcceptTCP()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				_ = c.Close()
			})
		}
	})
	spliceErr := make(chan error, 2*n)
	wg.Go(func() { // the proxy
		for {
			a, err := front.AcceptTCP()
			if err != nil {
				return
			}
			b, err := net.DialTCP("tcp", nil, upstream.Addr().(*net.TCPAddr))
			if err != nil {
				spliceErr <- err
				_ = a.Close()
				continue
			}
			wg.Go(func() {
				var err error
				if mode == "sockmap" {
					var st sockmap.Stats
					st, err = splicer.Splice(ctx, a, b, nil, nil)
					if err == nil && st.Copied {
						err = errors.New("pair was copied, not spliced")
					}
				} else {
					_, err = l4.Pipe(ctx, a, b, 0)
				}
				if err != nil && !errors.Is(err, context.Canceled) {
					spliceErr <- err
				}
			})
		}
	})

	var units atomic.Int64
	for range n {
		c, err := net.DialTCP("tcp", nil, front.Addr().(*net.TCPAddr))
		if err != nil {
			return result{}, err
		}
		context.AfterFunc(ctx, func() { _ = c.Close() })
		switch workload {
		case "stream":
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for ctx.Err() == nil {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					m, err := c.Read(buf)
					units.Add(int64(m))
					if err != nil {
						return
					}
				}
			})
		case "pingpong":
			wg.Go(func() {
				buf := make([]byte, 1024)
				for ctx.Err() == nil {
					if _, err := c.Write(buf); err != nil {
						return
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					units.Add(1)
				}
			})
		}
	}
	time.Sleep(500 * time.Millisecond) // warm up
	u0, sys0, proc0, t0 := units.Load(), systemCPU(), processCPU(), time.Now()
	time.Sleep(d)
	u1, sys1, proc1, t1 := units.Load(), systemCPU(), processCPU(), time.Now()
	cancel()
	select {
	case err := <-spliceErr:
		return result{}, err
	default:
	}
	if u1 == u0 {
		return result{}, errors.New("nothing moved")
	}
	return result{
		workload: workload, mode: mode, pairs: n,
		units: float64(u1 - u0), seconds: t1.Sub(t0).Seconds(),
		systemCPU: sys1 - sys0, processCPU: proc1 - proc0,
	}, nil
}

const userHZ = 100 // USER_HZ, the unit of /proc/stat and /proc/self/stat

// systemCPU returns the busy CPU-seconds of all CPUs since boot (user,
// nice, system, irq, softirq, steal), read from /proc/stat.
func systemCPU() float64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		log.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	total := 0.0
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseFloat(f[i], 64)
		total += v
	}
	return total / userHZ
}

// processCPU returns this process's user+system CPU-seconds.
func processCPU() float64 {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		log.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / userHZ
}

func writeReport(dir string, rs []result, d time.Duration) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	stamp := time.Now().UTC().Format("2006-01-02T150405Z")
	var b strings.Builder
	host, _ := os.Hostname()
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "# L4 pair splicing: l4.Pipe vs sockmap, %s\n\n", stamp)
	fmt.Fprintf(&b, "Machine %s, %d CPUs, kernel %s, %s. Clients, proxy and echo upstreams in one process on 127.0.0.1; "+
		"%s per case after 0.5 s warm-up. System CPU is all CPUs from /proc/stat (includes the kernel work queue that sends "+
		"sockmap-redirected bytes); process CPU is this process only. Ratios are sockmap / l4.Pipe.\n\n",
		host, runtime.NumCPU(), strings.TrimSpace(string(release)), runtime.Version(), d)
	find := func(w, mode string, n int) *result {
		for i := range rs {
			if rs[i].workload == w && rs[i].mode == mode && rs[i].pairs == n {
				return &rs[i]
			}
		}
		return nil
	}
	var pairs []int
	for _, r := range rs {
		if r.workload == "stream" && r.mode == "l4.Pipe" {
			pairs = append(pairs, r.pairs)
		}
	}
	b.WriteString("## Bulk stream (64 KiB writes, echoed)\n\n")
	b.WriteString("| pairs | mode | MB/s (client received) | system CPU-s/GB | process CPU-s/GB | throughput ratio | system CPU/GB ratio |\n|---|---|---|---|---|---|---|\n")
	for _, n := range pairs {
		base := find("stream", "l4.Pipe", n)
		for _, mode := range []string{"l4.Pipe", "sockmap"} {
			r := find("stream", mode, n)
			gb := r.units / 1e9
			fmt.Fprintf(&b, "| %d | %s | %.1f | %.3f | %.3f | %.2f | %.2f |\n", n, mode, r.units/r.seconds/1e6,
				r.systemCPU/gb, r.processCPU/gb, (r.units/r.seconds)/(base.units/base.seconds), (r.systemCPU/gb)/(base.systemCPU/(base.units/1e9)))
		}
	}
	b.WriteString("\n## Ping-pong (1 KiB request, 1 KiB echo)\n\n")
	b.WriteString("| pairs | mode | round trips/s | system CPU µs/rt | process CPU µs/rt | rate ratio | system CPU/rt ratio |\n|---|---|---|---|---|---|---|\n")
	for _, n := range pairs {
		base := find("pingpong", "l4.Pipe", n)
		for _, mode := range []string{"l4.Pipe", "sockmap"} {
			r := find("pingpong", mode, n)
			fmt.Fprintf(&b, "| %d | %s | %.0f | %.1f | %.1f | %.2f | %.2f |\n", n, mode, r.units/r.seconds,
				r.systemCPU/r.units*1e6, r.processCPU/r.units*1e6, (r.units/r.seconds)/(base.units/base.seconds), (r.systemCPU/r.units)/(base.systemCPU/base.units))
		}
	}
	path := filepath.Join(dir, "splice-"+stamp+".md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}
