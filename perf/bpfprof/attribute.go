package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// lineAddr is where the JIT put the code of one source line.
type lineAddr struct {
	addr uint64
	line string
}

// sample is one perf sample's instruction address.
type sample uint64

// readSamples reads `perf script -F ip,sym` output, keeping the samples
// whose symbol contains name (bpf_prog_<tag>_<name...>: the kernel keeps
// 15 bytes of a program's name, perf shows its whole function name).
func readSamples(r io.Reader, name string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.Contains(f[1], name) {
			continue
		}
		ip, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("sample address %q: %w", f[0], err)
		}
		out = append(out, sample(ip))
	}
	return out, sc.Err()
}

// histogram is samples per source line, most first.
type histogram struct {
	total int
	lines []lineCount
}

type lineCount struct {
	line    string
	samples int
}

// attribute counts each sample for the line whose code starts at or
// before it, closest: the JIT emits a line's instructions from its
// address to the next line's.
func attribute(lines []lineAddr, samples []sample) histogram {
	sorted := slices.SortedFunc(slices.Values(lines), func(a, b lineAddr) int { return cmp.Compare(a.addr, b.addr) })
	counts := map[string]int{}
	var h histogram
	for _, s := range samples {
		i, found := slices.BinarySearchFunc(sorted, uint64(s), func(l lineAddr, ip uint64) int { return cmp.Compare(l.addr, ip) })
		if !found {
			i--
		}
		if i < 0 {
			continue
		}
		counts[sorted[i].line]++
		h.total++
	}
	for l, n := range counts {
		h.lines = append(h.lines, lineCount{l, n})
	}
	slices.SortFunc(h.lines, func(a, b lineCount) int {
		return cmp.Or(cmp.Compare(b.samples, a.samples), cmp.Compare(a.line, b.line))
	})
	return h
}
