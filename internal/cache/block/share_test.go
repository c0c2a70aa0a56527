package block

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

func TestSecondCacheOnSameDirHits(t *testing.T) {
	f := newFixture(t, 5<<20+3, Config{BlockSize: 1 << 20})
	r := f.cache.Open(f.ref)
	f.readAll(r, 1<<20, f.data)
	r.Close()

	// A second process while the first is still running, then after it exits.
	for _, closeFirst := range []bool{false, true} {
		if closeFirst {
			f.cache.Close()
		}
		c2 := f.open(Config{Dir: f.cache.cfg.Dir, BlockSize: 1 << 20})
		f.store.reset()
		r2 := c2.Open(f.ref)
		f.readAll(r2, 128<<10, f.data)
		if got := c2.Cached(f.ref); got != f.ref.Size {
			t.Fatalf("Cached = %d, want %d", got, f.ref.Size)
		}
		if err := c2.Prefetch(context.Background(), f.ref, nil); err != nil {
			t.Fatal(err)
		}
		r2.Close()
		if reads, _, _ := f.store.stats(); reads != 0 {
			t.Fatalf("second cache issued %d GETs", reads)
		}
		if st := c2.Stats(); st.Misses != 0 || st.Hits == 0 {
			t.Fatalf("stats %+v", st)
		}
		c2.Close()
	}
}

// TestTwoProcessesShareFiles has two caches on one directory fetch the
// same object at the same time (so both write into the same files).
func TestTwoProcessesShareFiles(t *testing.T) {
	cfg := Config{BlockSize: 64 << 10, PartSize: 128 << 10}
	f := newFixture(t, 5<<20+999, cfg)
	cfg.Dir = f.cache.cfg.Dir
	caches := []*Cache{f.cache, f.open(cfg)}
	var wg sync.WaitGroup
	for i, c := range caches {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := c.Open(f.ref)
				defer r.Close()
				buf := make([]byte, 20_000)
				for k := range 200 {
					off := int64((k*7919 + g*104729 + i*50000) % len(f.data))
					if g == 0 {
						off = int64(k * len(buf) % len(f.data))
					}
					n, err := r.ReadAt(context.Background(), buf, off)
					if err != nil && err != io.EOF || !bytes.Equal(buf[:n], f.data[off:off+int64(n)]) {
						t.Errorf("cache %d read at %d: %d, %v", i, off, n, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err := caches[1].Prefetch(context.Background(), f.ref, nil); err != nil { // whatever readahead left out
		t.Fatal(err)
	}
	for i, c := range caches {
		if n := c.Stats().Corruptions; n != 0 {
			t.Errorf("cache %d saw %d corrupt blocks", i, n)
		}
	}
	c3 := f.open(cfg)
	f.store.reset()
	r := c3.Open(f.ref)
	defer r.Close()
	if got := c3.Cached(f.ref); got != f.ref.Size {
		t.Fatalf("Cached = %d after a Prefetch", got)
	}
	f.readAll(r, 100_000, f.data)
	if reads, _, _ := f.store.stats(); reads != 0 {
		t.Fatalf("%d GETs from a third cache", reads)
	}
}

// TestStartupScanEvictsOldObjects: a cache opened with a smaller limit
// on a directory an earlier process filled trims it to the limit, least
// recently used objects first.
func TestStartupScanEvictsOldObjects(t *testing.T) {
	cfg := Config{BlockSize: 64 << 10}
	f := newFixture(t, 256<<10, cfg)
	var refs []Ref
	for i := range 8 {
		ref := f.put(fmt.Sprintf("obj%d", i), randBytes(uint64(i), 256<<10))
		if err := f.cache.Prefetch(context.Background(), ref, nil); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	f.cache.Close()
	cfg.Dir, cfg.MaxBytes = f.cache.cfg.Dir, 1<<20
	c := f.open(cfg)
	waitFor(t, "the scan and an eviction", func() bool {
		st := c.Stats()
		return st.Evictions > 0 && st.BytesCached <= cfg.MaxBytes
	})
	var kept int
	for _, ref := range refs {
		switch got := c.Cached(ref); got {
		case 0:
		case ref.Size:
			kept++
		default:
			t.Errorf("%s: %d of %d bytes cached: objects are evicted whole", ref.Key, got, ref.Size)
		}
	}
	if kept == 0 || kept == len(refs) {
		t.Fatalf("%d of %d objects kept after trimming to %d", kept, len(refs), cfg.MaxBytes)
	}
}

// TestSharedDirFetchesOnce: caches sharing a directory (processes of one
// node: each has its own file descriptions, as two caches in one test
// process do) reading the same object at once download it about once:
// a block another one is fetching is waited for, not fetched again
// (claim.go). A claim left by a fetch that failed is taken over.
func TestSharedDirFetchesOnce(t *testing.T) {
	cfg := Config{BlockSize: 256 << 10, PartSize: 1 << 20}
	const size = 16<<20 + 12345
	for _, tc := range []struct {
		name     string
		failOnce int
	}{
		{name: "clean"},
		{name: "a fetch fails", failOnce: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, size, cfg)
			f.store.delay = 5 * time.Millisecond // GETs overlap
			f.store.failOnce = tc.failOnce
			c := cfg
			c.Dir = f.cache.cfg.Dir
			caches := []*Cache{f.cache, f.open(c), f.open(c)}
			var wg sync.WaitGroup
			for i, c := range caches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := c.Open(f.ref)
					defer r.Close()
					buf := make([]byte, 128<<10)
					for off := int64(0); off < int64(len(f.data)); off += int64(len(buf)) {
						n, err := r.ReadAt(context.Background(), buf, off)
						if err != nil && err != io.EOF || !bytes.Equal(buf[:n], f.data[off:off+int64(n)]) {
							t.Errorf("cache %d read at %d: %d, %v", i, off, n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			_, fetched, _ := f.store.stats()
			var waits int64
			for _, c := range caches {
				waits += c.Stats().ClaimWaits
			}
			t.Logf("%d bytes fetched for an object of %d (3 readers), %d claim waits", fetched, size, waits)
			if fetched > size+size/4 {
				t.Errorf("fetched %d bytes for an object of %d: the caches fetched the same blocks", fetched, size)
			}
			if waits == 0 {
				t.Error("no cache waited for another's fetch")
			}
		})
	}
}

// TestStuckClaimIsBounded: a block another process claimed and never
// fetches (that process is frozen) holds a read up for claimWaitLimit,
// then the read fetches it itself, and the rest of the stuck process's
// claims of the object are not waited for again.
func TestStuckClaimIsBounded(t *testing.T) {
	old := claimWaitLimit
	claimWaitLimit = 300 * time.Millisecond
	t.Cleanup(func() { claimWaitLimit = old })
	cfg := Config{BlockSize: 1 << 20, PartSize: 1 << 20}
	f := newFixture(t, 4<<20, cfg)
	cfg.Dir = f.cache.cfg.Dir
	frozen := f.open(cfg)
	var held []claim
	for idx := range int64(4) {
		cl, busy := frozen.claim(frozen.object(f.ref), idx)
		if busy || cl.f == nil {
			t.Fatalf("claim of block %d: busy %v", idx, busy)
		}
		held = append(held, cl)
	}
	t.Cleanup(func() {
		for i := range held {
			frozen.unclaim(&held[i])
		}
	})
	r := f.cache.Open(f.ref)
	defer r.Close()
	t0 := time.Now()
	f.readAll(r, 1<<20, f.data)
	took := time.Since(t0)
	if took < claimWaitLimit || took > 3*claimWaitLimit+time.Second {
		t.Fatalf("read of 4 stuck blocks took %v, want about one wait of %v", took, claimWaitLimit)
	}
}
