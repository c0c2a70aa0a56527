package block

import (
	"context"
	"testing"
	"time"
)

// TestClaimWaitWakes: a wait for a block another process claimed ends
// as soon as that process writes the block's record, or closes the index
// file (it died), not at the next poll: the polls here are a minute apart.
func TestClaimWaitWakes(t *testing.T) {
	oldMax, oldLimit := claimWaitMax, claimWaitLimit
	claimWaitMax, claimWaitLimit = time.Minute, 2*time.Minute
	t.Cleanup(func() { claimWaitMax, claimWaitLimit = oldMax, oldLimit })
	for _, tc := range []struct {
		name  string
		end   func(t *testing.T, f *fixture, other *Cache, cl *claim)
		fresh bool // the block is present when the wait ends
	}{
		{name: "record written", fresh: true, end: func(t *testing.T, f *fixture, other *Cache, cl *claim) {
			r := other.Open(f.ref) // its own claim does not hold up its own fetch
			defer r.Close()
			buf := make([]byte, 4096)
			if _, err := r.ReadAt(context.Background(), buf, 0); err != nil {
				t.Error(err)
			}
		}},
		{name: "holder closes", end: func(t *testing.T, f *fixture, other *Cache, cl *claim) {
			other.Close() // its files close: the kernel drops the lock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{BlockSize: 1 << 20, PartSize: 1 << 20}
			f := newFixture(t, 2<<20, cfg)
			cfg.Dir = f.cache.cfg.Dir
			other := f.open(cfg)
			cl, busy := other.claim(other.object(f.ref), 0)
			if busy || cl.f == nil {
				t.Fatalf("claim: busy %v", busy)
			}
			done := make(chan time.Duration, 1)
			o := f.cache.object(f.ref)
			go func() { // owner: this test; it waits on done
				t0 := time.Now()
				if f.cache.awaitOther(o, 0) {
					t.Error("the wait timed out")
				}
				done <- time.Since(t0)
			}()
			time.Sleep(200 * time.Millisecond) // the wait is asleep
			select {
			case <-done:
				t.Fatal("the wait ended while the claim was held")
			default:
			}
			tc.end(t, f, other, &cl)
			select {
			case took := <-done:
				t.Logf("woken after %v", took)
			case <-time.After(20 * time.Second):
				t.Fatal("the wait was not woken (polls are a minute apart)")
			}
			if got := f.cache.present(o, 0); got != tc.fresh {
				t.Errorf("block present = %v, want %v", got, tc.fresh)
			}
			other.unclaim(&cl)
			w := &f.cache.waker
			w.mu.Lock()
			n := len(w.byWD)
			w.mu.Unlock()
			if n != 0 {
				t.Errorf("%d inotify watches left after the wait", n)
			}
		})
	}
}
