package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live, headroom uint64
		max, want      int
	}{
		{4 * mib, 16 * mib, 400, 400},
		{8 * mib, 16 * mib, 400, 200},
		{16 * mib, 16 * mib, 400, 100},
		{64 * mib, 16 * mib, 400, 100},
		{1 * mib, 16 * mib, 800, 800},
		{0, 16 * mib, 400, 400},
	}
	for _, tc := range tests {
		if got := Percent(tc.live, tc.headroom, tc.max); got != tc.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.headroom, tc.max, got, tc.want)
		}
	}
}

// TestRun raises GOGC for this test binary's small live heap and restores
// it when stopped.
func TestRun(t *testing.T) {
	t.Setenv("GOGC", "")
	runtime.GC() // the live heap metric is known after a collection
	ctx, cancel := context.WithCancel(context.Background())
	set := make(chan int, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{Headroom: 1 << 40, MaxPercent: 300, Interval: time.Millisecond, OnChange: func(p int) { set <- p }})
	}()
	select {
	case p := <-set:
		if p != 300 {
			t.Fatalf("GOGC set to %d, want 300", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GOGC never set")
	}
	cancel()
	<-done
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("GOGC after Run is %d, want the 100 it found", p)
	}
}
