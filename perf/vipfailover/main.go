package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "perf/results", "directory for the report")
	agent := flag.String("agent", "", "novaedge-agent binary (empty: built from this tree)")
	reps := flag.Int("reps", 5, "repetitions per configuration")
	parts := flag.String("parts", "l2,bgp", "measurements to run, comma-separated (l2, bgp)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("vipfailover: ")
	if os.Geteuid() != 0 {
		log.Fatal("must run as root: it creates network namespaces and runs FRR and the agent in them")
	}
	for _, p := range []struct{ path, pkg string }{{ipCmd, "iproute2"}, {nftCmd, "nftables"}, {vtyshCmd, "frr"}, {filepath.Join(daemonDir, "bfdd"), "frr"}} {
		if _, err := os.Stat(p.path); err != nil {
			log.Fatalf("%s is missing: install the Debian package %s (hack/install-deps.sh)", p.path, p.pkg)
		}
	}
	want := map[string]bool{}
	for _, p := range strings.Split(*parts, ",") {
		switch p = strings.TrimSpace(p); p {
		case "l2", "bgp":
			want[p] = true
		default:
			log.Fatalf("-parts: unknown measurement %q (l2, bgp)", p)
		}
	}
	bin := *agent
	if bin == "" {
		dir, err := os.MkdirTemp("", "vipfailover-bin-")
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		bin = filepath.Join(dir, "novaedge-agent")
		if b, err := exec.Command("go", "build", "-o", bin, "./cmd/novaedge-agent").CombinedOutput(); err != nil {
			log.Fatalf("go build novaedge-agent: %v\n%s", err, b)
		}
	}
	bin, _ = filepath.Abs(bin)
	start := time.Now()
	stamp := start.UTC().Format("2006-01-02T150405Z")
	logf := func(f string, a ...any) { log.Printf(f, a...) }

	var rows []row
	fail := func(what string, err error) {
		log.Printf("%s: %v", what, err)
		rows = append(rows, row{name: what, err: err})
	}
	if want["l2"] {
		for _, ms := range []int{300, 100} {
			name := fmt.Sprintf("L2, agent, heartbeats 3 × %d ms: SIGKILL of the active → first ARP from the standby", ms)
			cfg := ms
			if ms == 300 {
				cfg = 0 // the default heartbeat timers
			}
			s, err := runL2(cfg, *reps, bin, logf)
			if err != nil {
				fail(name, err)
				continue
			}
			rows = append(rows, row{name: name, samples: s})
		}
	}
	results := map[string][]sample{}
	if want["bgp"] {
		for _, c := range []bgpCase{
			{speaker: "agent", bfdMs: 100}, {speaker: "agent", bfdMs: 300},
			{speaker: "frr", bfdMs: 100}, {speaker: "frr", bfdMs: 300},
			{speaker: "agent"},
		} {
			name := "BGP, " + c.String() + ": silence → FRR drops node-b's next hop"
			s, err := runBGP(c, *reps, bin, logf)
			if err != nil {
				fail(name, err)
				continue
			}
			results[c.String()] = s
			rows = append(rows, row{name: name, samples: s})
		}
	}
	var ratios []string
	for _, ms := range []int{100, 300} {
		a, f := results[bgpCase{speaker: "agent", bfdMs: ms}.String()], results[bgpCase{speaker: "frr", bfdMs: ms}.String()]
		if len(a) > 0 && len(f) > 0 {
			ma, mf := median(durations(a)), median(durations(f))
			ratios = append(ratios, fmt.Sprintf("| BFD 3 × %d ms | %s | %s | %.2f |", ms, ms3(ma), ms3(mf), float64(ma)/float64(mf)))
		}
	}
	path := filepath.Join(*out, "vipfailover-"+stamp+".md")
	if err := os.WriteFile(path, []byte(report(stamp, time.Since(start), *reps, rows, ratios)), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("report in %s (%v)", path, time.Since(start).Round(time.Second))
	for _, r := range rows {
		if r.err != nil {
			os.Exit(1)
		}
	}
}

type row struct {
	name    string
	samples []sample
	err     error
}

func durations(s []sample) []time.Duration {
	var d []time.Duration
	for _, x := range s {
		d = append(d, x.d)
	}
	return d
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms3(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func report(stamp string, took time.Duration, reps int, rows []row, ratios []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# VIP failover — %s\n\n", stamp)
	fmt.Fprintf(&b, "perf/vipfailover, %d repetitions per configuration, run took %v. Network namespaces on one machine (2 shared cores); FRR from the Debian package. See perf/vipfailover/doc.go for the method: L2 t0 = SIGKILL of the active agent, t1 = first ARP frame from the standby's MAC for the VIP seen by the client (probing every 10 ms); BGP t0 = nft returned (all of node-b's packets dropped), t1 = zebra's kernel route change without node-b (ip monitor, confirmed by vtysh).\n\n", reps, took.Round(time.Second))
	b.WriteString("| configuration | median | min | max | samples |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(&b, "| %s | failed: %s | | | |\n", r.name, strings.ReplaceAll(r.err.Error(), "\n", " "))
			continue
		}
		d := durations(r.samples)
		var all []string
		for _, x := range d {
			all = append(all, ms3(x))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.name, ms3(median(d)), ms3(slices.Min(d)), ms3(slices.Max(d)), strings.Join(all, ", "))
	}
	if len(ratios) > 0 {
		b.WriteString("\n## Agent vs FRR↔FRR (medians)\n\n| timers | agent | FRR | agent/FRR |\n|---|---|---|---|\n")
		for _, r := range ratios {
			b.WriteString(r + "\n")
		}
	}
	b.WriteString("\n## BGP cross-checks\n\n| configuration | vtysh poll medians (coarse) | nft run time median (t0 uncertainty) | notes |\n|---|---|---|---|\n")
	for _, r := range rows {
		if r.err != nil || !strings.HasPrefix(r.name, "BGP") {
			continue
		}
		var polls, nfts []time.Duration
		var notes []string
		for _, s := range r.samples {
			polls, nfts = append(polls, s.poll), append(nfts, s.nft)
			if s.note != "" {
				notes = append(notes, s.note)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.name, ms3(median(polls)), ms3(median(nfts)), strings.Join(notes, "; "))
	}
	b.WriteString("\nGoals (issue 6): L2 under 1 s; BGP with BFD 3 × 100 ms under 500 ms; match or beat FRR↔FRR at the same timers.\n")
	return b.String()
}
