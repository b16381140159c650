package main

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // descending: summarize must sort
	}
	tests := []struct {
		name string
		in   []time.Duration
		want summary
	}{
		{"empty", nil, summary{}},
		{"one", ms(7), summary{N: 1, P50: 7 * time.Millisecond, P99: 7 * time.Millisecond, Max: 7 * time.Millisecond}},
		{"even count takes the lower middle", ms(4, 1, 3, 2), summary{N: 4, P50: 2 * time.Millisecond, P99: 4 * time.Millisecond, Max: 4 * time.Millisecond}},
		{"odd count takes the middle", ms(5, 1, 3), summary{N: 3, P50: 3 * time.Millisecond, P99: 5 * time.Millisecond, Max: 5 * time.Millisecond}},
		{"p99 of 100 is the 99th", ms(hundred...), summary{N: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := append([]time.Duration(nil), tc.in...)
			if got := summarize(tc.in); got != tc.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			for i := range orig {
				if tc.in[i] != orig[i] {
					t.Fatalf("summarize reordered its input: %v, was %v", tc.in, orig)
				}
			}
		})
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name string
		a, b time.Duration
		want string
	}{
		{"ten times", 150 * time.Millisecond, 15 * time.Millisecond, "10.0×"},
		{"below one", time.Millisecond, 4 * time.Millisecond, "0.2×"},
		{"zero baseline", time.Millisecond, 0, "n/a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratio(tc.a, tc.b); got != tc.want {
				t.Errorf("ratio(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    procMem
		wantErr bool
	}{
		{"both", "Name:\tnovaedge\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n", procMem{RSS: 100 << 20, HWM: 200 << 20}, false},
		{"no VmRSS (zombie)", "Name:\tnovaedge\nState:\tZ (zombie)\n", procMem{}, true},
		{"unexpected unit", "VmHWM:\t1 MB\nVmRSS:\t1 kB\n", procMem{}, true},
		{"not a number", "VmHWM:\tx kB\nVmRSS:\t1 kB\n", procMem{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStatus error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseStatus = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseTook(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want time.Duration
	}{
		{"nanoseconds", "1500000", 1500 * time.Microsecond},
		{"duration string", `"2.5s"`, 2500 * time.Millisecond},
		{"garbage", `{}`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseTook([]byte(tc.raw)); got != tc.want {
				t.Errorf("parseTook(%s) = %v, want %v", tc.raw, got, tc.want)
			}
		})
	}
}

func TestBuildLog(t *testing.T) {
	var out strings.Builder
	h := newBuildLog(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	log := slog.New(h).With("component", "controller")
	log.Debug("snapshots built", "nodes", 3, "took", 42*time.Millisecond)
	log.Debug("something else", "took", time.Second)
	log.Warn("a warning")
	log.WithGroup("g").Debug("snapshots built", "took", 7*time.Millisecond)

	if got, want := h.since(0), []time.Duration{42 * time.Millisecond, 7 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	if got := h.since(1); !slices.Equal(got, []time.Duration{7 * time.Millisecond}) {
		t.Errorf("since(1) = %v, want [7ms]", got)
	}
	if s := out.String(); !strings.Contains(s, "a warning") || strings.Contains(s, "snapshots built") {
		t.Errorf("passed on %q; want the warning only", s)
	}
}
