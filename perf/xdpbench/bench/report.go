package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write writes the report as xdp-<stamp>.md and xdp-<stamp>.json into dir
// and returns their paths.
func Write(dir string, r *Report) (md, js string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dir, err)
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("encode report: %w", err)
	}
	js = filepath.Join(dir, "xdp-"+r.Stamp+".json")
	if err := os.WriteFile(js, append(raw, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("write report: %w", err)
	}
	md = filepath.Join(dir, "xdp-"+r.Stamp+".md")
	if err := os.WriteFile(md, []byte(Markdown(r)), 0o644); err != nil {
		return "", "", fmt.Errorf("write report: %w", err)
	}
	return md, js, nil
}

// Markdown renders the report: the machine, one table per traffic profile
// and the case descriptions.
func Markdown(r *Report) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# XDP forwarding benchmark, %s\n\n", r.Stamp)
	fmt.Fprintf(&b, "Machine %s: kernel %s, %d CPUs (%s), %s.\n", m.Host, m.Kernel, m.CPUs, m.CPUModel, m.GoVersion)
	pktgen := "absent"
	if m.Pktgen {
		pktgen = "present, not used"
	}
	fmt.Fprintf(&b, "Traffic: %s on CPUs %v, %d-byte frames (kernel pktgen: %s). Sink: XDP on the generator's veth (%s).\n",
		m.Generator, r.GenCPUs, r.FrameSize, pktgen, m.GenXDP)
	fmt.Fprintf(&b, "Each figure is the median of %d × %s (after %s of warm-up); repetitions interleave the cases.\n\n",
		r.Reps, r.Duration, r.Warmup)
	b.WriteString("- **pps**: frames that came back to the sink forwarded to the expected destination, per second; **sent**: frames the generator transmitted; **delivered** = pps / sent.\n")
	b.WriteString("- **CPU ns/pkt**: CPU time of the generator threads and their CPUs' ksoftirqd per forwarded frame. " +
		"Every frame is generated, forwarded by the node and sunk on one CPU (one veth queue per CPU), so this is the whole pipeline's cost " +
		"and hardly depends on other load on the machine, unlike pps.\n")
	b.WriteString("- The sink counts a frame as forwarded when it is IPv4 UDP/TCP to the case's expected destination: the backend for load balancers, the VIP itself for xdp-tx (which only swaps MACs). " +
		"The generator's own frames leave through the veth and never reach its receive side, so anything arriving there was sent back by the node; frames to other destinations are counted apart (\"other\").\n")
	b.WriteString("- **vs** columns: pps ratio / CPU-cost ratio (reference ns per packet ÷ this case's), both higher = better. " +
		"Generator and sink costs are in every case, so these ratios understate how much the node's own work differs; " +
		"**+ns vs " + CaseTxMin + "** is that difference in absolute terms: what the case's forwarding costs beyond the minimal NAT program.\n")
	if m.CPUClockCaveat != "" {
		fmt.Fprintf(&b, "\n**Caveat**: %s.\n", m.CPUClockCaveat)
	}
	if r.Interrupted {
		b.WriteString("\n**Interrupted**: not every repetition ran.\n")
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(&b, "\n## %s: %s\n\n", p.Name, p.Doc)
		b.WriteString("| case | node XDP | pps | sent | delivered | CPU ns/pkt | +ns vs " + CaseTxMin + " | vs " + CaseTxMin + " | vs " + CaseNftables + " | reps (pps) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, res := range r.Results {
			if res.Profile != p.Name {
				continue
			}
			if res.Status != "ok" {
				fmt.Fprintf(&b, "| %s | | %s | | | | | | | |\n", res.Case, res.Status)
				continue
			}
			var reps []string
			var other uint64
			for _, x := range res.Reps {
				reps = append(reps, mpps(x.PPS))
				other += x.Other
			}
			delivered := ""
			if res.SentPPS > 0 {
				delivered = fmt.Sprintf("%.1f %%", 100*res.PPS/res.SentPPS)
			}
			if other > 0 {
				delivered += fmt.Sprintf(" (%d other)", other)
			}
			extra := "–"
			if res.Case != CaseTxMin && res.ExtraNsVsTxMin != 0 {
				extra = fmt.Sprintf("%+.0f", res.ExtraNsVsTxMin)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.0f | %s | %s / %s | %s / %s | %s |\n", res.Case, res.NodeXDP,
				mpps(res.PPS), mpps(res.SentPPS), delivered, res.CPUNsPerPacket, extra,
				ratio2(res.VsTxMin), ratio2(res.CPUVsTxMin), ratio2(res.VsNftables), ratio2(res.CPUVsNftables), strings.Join(reps, ", "))
		}
	}
	goals(&b, r)
	b.WriteString("\n## Cases\n\n")
	for _, c := range r.Cases {
		fmt.Fprintf(&b, "- **%s**: %s\n", c.Name, c.Doc)
	}
	return b.String()
}

func mpps(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f M", v/1e6)
}

func ratio2(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// goals states, per profile, whether NovaEdge meets its goals against both
// references, by pps and by CPU cost.
func goals(b *strings.Builder, r *Report) {
	var lines []string
	for _, res := range r.Results {
		if res.Case != CaseNovaEdge {
			continue
		}
		if res.Status != "ok" {
			lines = append(lines, fmt.Sprintf("- %s: %s", res.Profile, res.Status))
			continue
		}
		lines = append(lines, fmt.Sprintf("- %s: vs %s %s / %s (goal ≥ %.2f), vs %s %s / %s (goal ≥ %.0f)", res.Profile,
			CaseTxMin, verdict(res.VsTxMin, GoalVsTxMin), verdict(res.CPUVsTxMin, GoalVsTxMin),
			GoalVsTxMin, CaseNftables, verdict(res.VsNftables, GoalVsNftables), verdict(res.CPUVsNftables, GoalVsNftables), GoalVsNftables))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## NovaEdge goals (pps ratio / CPU-cost ratio)\n\n%s\n", strings.Join(lines, "\n"))
}

func verdict(v, goal float64) string {
	if v == 0 {
		return "–"
	}
	if v >= goal {
		return fmt.Sprintf("%.2f ✓", v)
	}
	return fmt.Sprintf("%.2f ✗", v)
}
