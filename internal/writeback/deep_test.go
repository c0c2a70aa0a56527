package writeback

import (
	"sync"
	"testing"
)

// TestDeep: deep runs its calls on workers that outlive them (one worker
// serves calls made one after another), starts a worker per call in
// flight (a call never waits for another), and runs calls on the caller's
// goroutine once the manager is closed.
func TestDeep(t *testing.T) {
	e := newEnv(t)
	m := e.open(e.config())
	for i := range 10 {
		ran := false
		m.deep(func() { ran = true })
		if !ran {
			t.Fatalf("call %d did not run", i)
		}
	}
	if n := m.deepPool.live.Load(); n != 1 {
		t.Fatalf("%d workers after 10 calls one after another, want 1", n)
	}
	const n = 8
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	for range n {
		done.Go(func() {
			m.deep(func() {
				started.Done()
				<-release // held until all n run at once
			})
		})
	}
	started.Wait()
	if live := m.deepPool.live.Load(); live != n {
		t.Errorf("%d workers for %d calls in flight, want %d", live, n, n)
	}
	close(release)
	done.Wait()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if live := m.deepPool.live.Load(); live != 0 {
		t.Fatalf("%d workers after Close, want 0", live)
	}
	ran := false
	m.deep(func() { ran = true })
	if !ran {
		t.Fatal("a call after Close did not run")
	}
}
