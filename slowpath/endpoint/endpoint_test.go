package endpoint

import (
	"testing"
	"time"
)

func TestAvailability(t *testing.T) {
	now := time.Unix(1000, 0)
	e := New("10.0.0.1:80")
	if !e.Available(now) {
		t.Fatal("a new endpoint is not available")
	}
	e.SetActiveHealthy(false)
	if e.Available(now) || e.ActiveHealthy() {
		t.Fatal("an actively unhealthy endpoint is available")
	}
	e.SetActiveHealthy(true)
	e.Eject(now.Add(30 * time.Second))
	if e.Available(now) || !e.Ejected(now.Add(29*time.Second)) || e.Ejected(now.Add(30*time.Second)) {
		t.Fatal("ejection window wrong")
	}
	if !e.EjectedUntil().Equal(now.Add(30 * time.Second)) {
		t.Fatalf("EjectedUntil = %v", e.EjectedUntil())
	}
	e.Uneject()
	if !e.Available(now) || !e.EjectedUntil().IsZero() {
		t.Fatal("Uneject did not end the ejection")
	}
}

func TestInflight(t *testing.T) {
	e := New("a:1")
	e.Begin()
	e.Begin()
	e.End()
	if e.Inflight() != 1 {
		t.Fatalf("Inflight = %d, want 1", e.Inflight())
	}
}

func TestPeakEWMA(t *testing.T) {
	now := time.Unix(1000, 0)
	e := New("a:1")
	if _, ok := e.Latency(); ok {
		t.Fatal("latency before any observation")
	}
	e.ObserveLatency(10*time.Millisecond, now)
	// A peak replaces the average at once.
	e.ObserveLatency(100*time.Millisecond, now.Add(time.Millisecond))
	if l, _ := e.Latency(); l != 100*time.Millisecond {
		t.Fatalf("after a peak: %v, want 100ms", l)
	}
	// A lower value right after barely moves it; long after, it dominates.
	e.ObserveLatency(10*time.Millisecond, now.Add(2*time.Millisecond))
	if l, _ := e.Latency(); l < 99*time.Millisecond {
		t.Fatalf("1ms later: %v, want still about 100ms", l)
	}
	e.ObserveLatency(10*time.Millisecond, now.Add(time.Minute))
	if l, _ := e.Latency(); l > 11*time.Millisecond {
		t.Fatalf("a minute later: %v, want about 10ms", l)
	}
}

func TestLatencyDecaysWhenIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	e := New("a:1")
	e.ObserveLatency(100*time.Millisecond, now)
	if l, ok := e.LatencyAt(now); !ok || l != 100*time.Millisecond {
		t.Fatalf("at the observation: %v %v", l, ok)
	}
	l, _ := e.LatencyAt(now.Add(DecayTime))
	if l < 36*time.Millisecond || l > 37*time.Millisecond {
		t.Fatalf("one decay time later: %v, want 100ms/e", l)
	}
	if l, _ := e.LatencyAt(now.Add(time.Minute)); l > time.Millisecond {
		t.Fatalf("a minute idle: %v, want nearly 0", l)
	}
	if l, _ := e.Latency(); l != 100*time.Millisecond {
		t.Fatalf("LatencyAt changed the stored value: %v", l)
	}
}
