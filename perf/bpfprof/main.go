// Command bpfprof attributes perf samples of a JIT-compiled BPF program to
// the C source lines they ran, where `perf annotate` cannot (it needs
// binutils' libopcodes for BPF, which Debian's perf lacks, as bpftool's
// `prog dump jited` lacks libbfd). It reads the program's line table from
// the kernel (BTF line info and the JIT address of each line), the samples
// from `perf script -F ip,sym`, and prints the share of samples per line.
// With -jited FILE it also writes the program's machine code, for
// `objdump -D -b binary -m i386:x86-64 --adjust-vma=<first ksym>`.
//
// Usage, while the program runs under load (as root):
//
//	perf record -a -o perf.data -- sleep 8
//	perf script -i perf.data -F ip,sym > samples.txt
//	go run ./perf/bpfprof -id <ID from bpftool prog show> < samples.txt
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/cilium/ebpf"
)

func main() {
	id := flag.Uint("id", 0, "ID of the loaded program (bpftool prog show)")
	top := flag.Int("top", 60, "lines to print")
	jited := flag.String("jited", "", "also write the program's machine code to this file")
	flag.Parse()
	if *id == 0 {
		log.Fatal("-id: the ID of a loaded program is required")
	}
	lines, name, err := lineTable(ebpf.ProgramID(*id), *jited)
	if err != nil {
		log.Fatal(err)
	}
	samples, err := readSamples(os.Stdin, name)
	if err != nil {
		log.Fatal(err)
	}
	h := attribute(lines, samples)
	fmt.Printf("%s: %d samples in the program\n", name, h.total)
	for i, e := range h.lines {
		if i == *top {
			break
		}
		fmt.Printf("%5.1f%%  %s\n", 100*float64(e.samples)/float64(h.total), e.line)
	}
}

// lineTable reads the JIT address of each source line of program id, and
// the program's symbol name as perf shows it (bpf_prog_<tag>_<name>).
func lineTable(id ebpf.ProgramID, jitedOut string) ([]lineAddr, string, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, "", fmt.Errorf("open program %d: %w", id, err)
	}
	defer func() { _ = p.Close() }()
	info, err := p.Info()
	if err != nil {
		return nil, "", fmt.Errorf("program %d info: %w", id, err)
	}
	lis, err := info.LineInfos()
	if err != nil {
		return nil, "", fmt.Errorf("program %d line info (loaded with BTF?): %w", id, err)
	}
	addrs, ok := info.JitedLineInfos()
	if !ok || len(addrs) != len(lis) {
		return nil, "", fmt.Errorf("program %d: %d JIT line addresses for %d lines (JIT off, or kernel.kptr_restrict?)", id, len(addrs), len(lis))
	}
	if jitedOut != "" {
		code, ok := info.JitedInsns()
		if !ok {
			return nil, "", fmt.Errorf("program %d: no machine code to write", id)
		}
		if err := os.WriteFile(jitedOut, code, 0o644); err != nil {
			return nil, "", err
		}
		ks, _ := info.JitedKsymAddrs()
		fmt.Fprintf(os.Stderr, "machine code in %s; functions at %#x\n", jitedOut, ks)
	}
	out := make([]lineAddr, len(lis))
	for i, l := range lis {
		out[i] = lineAddr{addr: addrs[i], line: fmt.Sprintf("%s:%d  %s", l.Line.FileName(), l.Line.LineNumber(), strings.TrimSpace(l.Line.Line()))}
	}
	return out, "_" + info.Name, nil // perf's symbol: bpf_prog_<tag>_<name>
}
