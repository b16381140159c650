package workpool

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReusesWorker: sequential jobs run on one goroutine, the worker's,
// whose stack stays grown; the caller's goroutine only waits.
func TestReusesWorker(t *testing.T) {
	p := New(4, 4, time.Hour)
	var first, second string
	p.Run(func() { first = goid() })
	// Run returns as soon as the job is done; the worker waits for the
	// next one a moment later.
	for deadline := time.Now().Add(10 * time.Second); p.idle.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not wait for another job")
		}
		time.Sleep(time.Millisecond)
	}
	p.Run(func() { second = goid() })
	if first == "" || first != second || first == goid() {
		t.Fatalf("two sequential jobs ran on goroutines %q and %q (caller %q), want one worker", first, second, goid())
	}
	if n := p.workers.Load(); n != 1 {
		t.Fatalf("%d workers after two sequential jobs, want 1", n)
	}
}

// goid returns the calling goroutine's number, from its stack trace's
// first line ("goroutine 7 [running]:").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

func TestPanicReachesCaller(t *testing.T) {
	p := New(2, 2, time.Hour)
	want := errors.New("boom")
	func() {
		defer func() {
			if err, ok := recover().(error); !ok || !errors.Is(err, want) {
				t.Fatalf("recovered %v, want %v", err, want)
			}
		}()
		p.Run(func() { panic(want) })
		t.Fatal("Run returned after a panic")
	}()
	// The worker survives and serves the next job.
	ran := false
	p.Run(func() { ran = true })
	if !ran {
		t.Fatal("the next job did not run")
	}
}

// TestConcurrentAndFull: jobs run concurrently on up to max workers; a
// job beyond that runs on its caller's goroutine, and none is lost.
func TestConcurrentAndFull(t *testing.T) {
	const max = 3
	p := New(max, max, time.Hour)
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Run(func() { started <- struct{}{}; <-release })
		}()
	}
	for range max {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("blocked jobs did not all start: they do not run concurrently")
		}
	}
	inline := false
	p.Run(func() { inline = true })
	if !inline {
		t.Fatal("a job beyond max did not run")
	}
	if n := p.workers.Load(); n != max {
		t.Fatalf("%d workers, want %d", n, max)
	}
	close(release)
	wg.Wait()
}

// TestReap: idle workers beyond keep leave.
func TestReap(t *testing.T) {
	p := New(8, 1, 10*time.Millisecond)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); p.Run(func() { <-release }) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.workers.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers started, want 5", p.workers.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for p.workers.Load() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers stay idle, want 1", p.workers.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGo: Go returns before fn does, runs fn on a worker that the next
// job reuses, and beyond max still runs every fn without blocking.
func TestGo(t *testing.T) {
	const max = 2
	p := New(max, max, time.Hour)
	release := make(chan struct{})
	ids := make(chan string, 8)
	for range max + 2 {
		// Would deadlock here if Go waited for fn.
		p.Go(func() { ids <- goid(); <-release })
	}
	seen := map[string]bool{}
	for range max + 2 {
		select {
		case id := <-ids:
			if id == goid() {
				t.Fatal("Go ran fn on the caller's goroutine")
			}
			seen[id] = true
		case <-time.After(10 * time.Second):
			t.Fatal("jobs started by Go did not all run")
		}
	}
	if len(seen) != max+2 {
		t.Fatalf("%d distinct goroutines for %d concurrent jobs", len(seen), max+2)
	}
	if n := p.workers.Load(); n != max {
		t.Fatalf("%d workers, want %d", n, max)
	}
	close(release)
	// A worker freed by Go's jobs serves a later Run.
	deadline := time.Now().Add(10 * time.Second)
	for p.idle.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no worker became idle after its Go job returned")
		}
		time.Sleep(time.Millisecond)
	}
	var id string
	p.Run(func() { id = goid() })
	if id == goid() {
		t.Fatal("Run after Go jobs ran inline, want an idle worker")
	}
}
