package block

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func TestVersionChangeNeverServesOldBlocks(t *testing.T) {
	f := newFixture(t, 300_000, Config{BlockSize: 64 << 10})
	ctx := context.Background()
	r1 := f.cache.Open(f.ref)
	f.readAll(r1, 64<<10, f.data)
	r1.Close()

	v2 := randBytes(99, len(f.data)) // same size, new bytes
	ref2 := f.put("obj", v2)
	if ref2.Version == f.ref.Version {
		t.Fatal("store kept the version")
	}
	f.store.reset()
	r2 := f.cache.Open(ref2)
	defer r2.Close()
	f.readAll(r2, 10_000, v2)
	if reads, _, _ := f.store.stats(); reads == 0 {
		t.Fatal("new version served without fetching")
	}

	// The old version's blocks are still its own bytes; its uncached
	// blocks fail the version check instead of mixing versions.
	r1 = f.cache.Open(f.ref)
	defer r1.Close()
	buf := make([]byte, 100)
	if _, err := r1.ReadAt(ctx, buf, 10); err != nil || !bytes.Equal(buf, f.data[10:110]) {
		t.Fatalf("old version, cached block: %v", err)
	}
	f.cache.Close()
	for _, name := range blockFiles(t, f.cache.cfg.Dir) {
		os.Remove(name)
	}
	c := f.open(Config{Dir: f.cache.cfg.Dir, BlockSize: 64 << 10})
	r3 := c.Open(f.ref)
	defer r3.Close()
	if _, err := r3.ReadAt(ctx, buf, 10); !isPrecondition(err) {
		t.Fatalf("old version, uncached block: err = %v, want ErrPrecondition", err)
	}
}

func isPrecondition(err error) bool { return err != nil && errorsIs(err, objstore.ErrPrecondition) }

// blockFiles lists the block files under dir.
func blockFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestCorruptBlockRefetched(t *testing.T) {
	const bs = 256 << 10
	// An object of four blocks; block 1 (or the index header) is damaged.
	type damage func(t *testing.T, o *object)
	tests := []struct {
		name    string
		damage  damage
		refetch int64 // bytes fetched again
		// counted: the damage is seen by a read (a resized file may instead
		// be rewritten by readahead before a read looks at it).
		counted bool
	}{
		{name: "flipped data byte", refetch: bs, counted: true, damage: func(t *testing.T, o *object) { flip(t, o.dataPath(), 1*bs+200_000) }},
		{name: "flipped record byte", refetch: bs, counted: true, damage: func(t *testing.T, o *object) { flip(t, o.idxPath(), o.recOff(1)+9) }},
		{name: "record of another block", refetch: bs, counted: true, damage: func(t *testing.T, o *object) {
			fh, _ := os.OpenFile(o.idxPath(), os.O_RDWR, 0)
			defer fh.Close()
			rec := make([]byte, o.recLen)
			fh.ReadAt(rec, o.recOff(0))
			fh.WriteAt(rec, o.recOff(1))
		}},
		{name: "flipped header byte", refetch: 4 * bs, counted: true, damage: func(t *testing.T, o *object) { flip(t, o.idxPath(), 20) }},
		{name: "truncated in block 3", refetch: bs, damage: func(t *testing.T, o *object) { os.Truncate(o.dataPath(), 3*bs+1000) }},
		{name: "block present but zero", refetch: bs, counted: true, damage: func(t *testing.T, o *object) { punch(t, o.dataPath(), 1*bs, bs) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{BlockSize: bs}
			f := newFixture(t, 4*bs, cfg)
			r := f.cache.Open(f.ref)
			f.readAll(r, bs, f.data)
			r.Close()
			f.cache.Close()
			cfg.Dir = f.cache.cfg.Dir
			o := newObject(cfg.Dir, bs, f.ref)
			tt.damage(t, o)

			c := f.open(cfg)
			f.store.reset()
			r = c.Open(f.ref)
			defer r.Close()
			f.readAll(r, 100_000, f.data)
			if _, n, _ := f.store.stats(); n != tt.refetch {
				t.Fatalf("refetched %d bytes, want %d", n, tt.refetch)
			}
			if tt.counted && c.Stats().Corruptions == 0 {
				t.Fatal("corruption not counted")
			}
			// The repaired copy serves a third process without a GET.
			c.Close()
			c = f.open(cfg)
			f.store.reset()
			r3 := c.Open(f.ref)
			defer r3.Close()
			f.readAll(r3, bs, f.data)
			if reads, _, _ := f.store.stats(); reads != 0 {
				t.Fatalf("%d GETs after the repair", reads)
			}
		})
	}
}

// TestCorruptChunkOfOpenBlock damages a chunk of a block after the cache
// opened its segment (and verified another chunk of it).
func TestCorruptChunkOfOpenBlock(t *testing.T) {
	const bs = 1 << 20
	f := newFixture(t, bs, Config{BlockSize: bs})
	r := f.cache.Open(f.ref)
	f.readAll(r, bs, f.data)
	r.Close()
	f.cache.Close()
	c := f.open(Config{Dir: f.cache.cfg.Dir, BlockSize: bs})
	r = c.Open(f.ref)
	defer r.Close()
	buf := make([]byte, 100)
	if _, err := r.ReadAt(context.Background(), buf, 0); err != nil || !bytes.Equal(buf, f.data[:100]) {
		t.Fatalf("first read: %v", err)
	}
	o := c.object(f.ref)
	flip(t, o.dataPath(), 5*65536+7)
	if _, _, ok := r.CachedFile(5*65536, 100); ok {
		t.Fatal("CachedFile served a corrupt chunk")
	}
	if _, err := r.ReadAt(context.Background(), buf, 5*65536); err != nil || !bytes.Equal(buf, f.data[5*65536:5*65536+100]) {
		t.Fatalf("read after damage: %v", err)
	}
	if c.Stats().Corruptions == 0 {
		t.Fatal("corruption not counted")
	}
}

// punch deallocates [off, off+n) of the file at path: it reads as zeros.
func punch(t *testing.T, path string, off, n int64) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	const punchHole, keepSize = 0x2, 0x1
	if err := syscall.Fallocate(int(fh.Fd()), punchHole|keepSize, off, n); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	b := make([]byte, 1)
	if _, err := fh.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := fh.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestEvictionKeepsWithinMaxBytes(t *testing.T) {
	const bs, max = 64 << 10, 1 << 20
	f := newFixture(t, 6<<20, Config{BlockSize: bs, MaxBytes: max, ReadaheadMax: 256 << 10})
	for range 2 {
		r := f.cache.Open(f.ref)
		f.readAll(r, 100_000, f.data)
		r.Close()
	}
	diskBytes := func() (n int64) {
		for _, p := range blockFiles(t, f.cache.cfg.Dir) {
			if fi, err := os.Stat(p); err == nil {
				n += allocated(fi)
			}
		}
		return n
	}
	// The evictor unlinks just after it updates the index: poll both.
	waitFor(t, "eviction", func() bool {
		st := f.cache.Stats()
		return st.BytesCached <= max && st.Evictions > 0 && diskBytes() <= max
	})
}

func TestConcurrentReadsFetchOnce(t *testing.T) {
	f := newFixture(t, 4<<20, Config{BlockSize: 1 << 20})
	f.store.delay = 30 * time.Millisecond
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f.cache.Open(f.ref)
			defer r.Close()
			buf := make([]byte, 4096)
			off := int64(2<<20 + g*1000)
			if _, err := r.ReadAt(context.Background(), buf, off); err != nil || !bytes.Equal(buf, f.data[off:off+4096]) {
				t.Errorf("read: %v", err)
			}
		}()
	}
	wg.Wait()
	if reads, n, _ := f.store.stats(); reads != 1 || n != 1<<20 {
		t.Fatalf("%d GETs, %d bytes; want 1 GET of one block", reads, n)
	}
}

func TestSequentialReadaheadIsParallel(t *testing.T) {
	const size = 48 << 20
	f := newFixture(t, size, Config{BlockSize: 1 << 20, PartSize: 2 << 20, ReadaheadMax: 32 << 20})
	// GETs slow enough that the reader catches up with them even on a
	// loaded machine: with 20 ms, a reader slowed by -race and parallel
	// packages consumed each part about as fast as one arrived, and only
	// 5 were ever in flight (1 run in 60).
	f.store.delay = 100 * time.Millisecond
	r := f.cache.Open(f.ref)
	defer r.Close()
	f.readAll(r, 128<<10, f.data)
	reads, n, maxIn := f.store.stats()
	if maxIn < 6 {
		t.Fatalf("at most %d GETs in flight, want several", maxIn)
	}
	if n != size {
		t.Fatalf("fetched %d bytes for a %d-byte object", n, size)
	}
	if reads > size/(1<<20) {
		t.Fatalf("%d GETs: readahead is not batching", reads)
	}
	if st := f.cache.Stats(); st.PrefetchedBytes < size/2 || st.ReadaheadWindow == 0 {
		t.Fatalf("stats %+v: readahead did not do the work", st)
	}
}

func TestRandomReadsFetchOnlyTheirBlock(t *testing.T) {
	const bs = 1 << 20
	f := newFixture(t, 64<<20, Config{BlockSize: bs})
	r := f.cache.Open(f.ref)
	defer r.Close()
	offs := []int64{40<<20 + 5, 3<<20 + 100, 60 << 20, 20<<20 + 77, 50 << 20, 9<<20 + 1}
	buf := make([]byte, 4096)
	for _, off := range offs {
		if _, err := r.ReadAt(context.Background(), buf, off); err != nil || !bytes.Equal(buf, f.data[off:off+4096]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	waitFor(t, "fetches to finish", func() bool { return f.cache.Stats().FetchesInFlight == 0 })
	reads, n, _ := f.store.stats()
	if reads != len(offs) || n != int64(len(offs))*bs {
		t.Fatalf("%d GETs, %d bytes for %d random reads; want one block each", reads, n, len(offs))
	}
}

func TestMemoryBudget(t *testing.T) {
	const budget = 3 * bufSize
	f := newFixture(t, 32<<20, Config{BlockSize: 1 << 20, PartSize: 1 << 20, MemoryBudget: budget})
	f.store.delay = 10 * time.Millisecond
	r := f.cache.Open(f.ref)
	defer r.Close()
	f.readAll(r, 1<<20, f.data)
	if _, _, maxIn := f.store.stats(); maxIn > 3 {
		t.Fatalf("%d GETs in flight with a budget of 3 buffers", maxIn)
	}
	if m := f.cache.Stats().MemoryInUse; m > budget || m == 0 {
		t.Fatalf("MemoryInUse = %d, budget %d", m, budget)
	}
}

func TestPrefetch(t *testing.T) {
	const size = 10<<20 + 17
	f := newFixture(t, size, Config{BlockSize: 1 << 20, PartSize: 2 << 20})
	var last int64
	err := f.cache.Prefetch(context.Background(), f.ref, func(done int64) {
		if done < last {
			t.Errorf("progress went back: %d after %d", done, last)
		}
		last = done
	})
	if err != nil || last != size {
		t.Fatalf("Prefetch: %v, progress %d", err, last)
	}
	if got := f.cache.Cached(f.ref); got != size {
		t.Fatalf("Cached = %d", got)
	}
	f.store.reset()
	r := f.cache.Open(f.ref)
	defer r.Close()
	f.readAll(r, 1<<20, f.data)
	if reads, _, _ := f.store.stats(); reads != 0 {
		t.Fatalf("%d GETs after Prefetch", reads)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	other := f.put("other", randBytes(5, 3<<20))
	if err := f.cache.Prefetch(ctx, other, nil); err != context.Canceled {
		t.Fatalf("canceled Prefetch: %v", err)
	}
}

func TestFillRandomUpTo(t *testing.T) {
	const size = 8 << 20
	f := newFixture(t, size, Config{BlockSize: 1 << 20, FillRandomUpTo: size})
	r := f.cache.Open(f.ref)
	defer r.Close()
	buf := make([]byte, 4096)
	if _, err := r.ReadAt(context.Background(), buf, 5<<20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "background fill", func() bool { return f.cache.Cached(f.ref) == size })
}

// TestFillIsParallel checks that a background fill keeps fillParts GETs
// in flight (8 with the default 32 workers), not one at a time.
func TestFillIsParallel(t *testing.T) {
	const size = 48 << 20
	f := newFixture(t, size, Config{BlockSize: 1 << 20, PartSize: 1 << 20, FillRandomUpTo: size})
	f.store.delay = 20 * time.Millisecond
	r := f.cache.Open(f.ref)
	defer r.Close()
	buf := make([]byte, 4096)
	if _, err := r.ReadAt(context.Background(), buf, 30<<20); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "background fill", func() bool { return f.cache.Cached(f.ref) == size })
	reads, n, maxIn := f.store.stats()
	// The fill queues 8 parts and tops up at 4 left; a read may add one.
	if f.cache.fillParts() != 8 || maxIn < 6 {
		t.Errorf("fill of %d parts: at most %d GETs in flight, want 8 parts and >= 6", f.cache.fillParts(), maxIn)
	}
	if n != size || reads > size>>20 {
		t.Errorf("%d GETs, %d bytes for a %d-byte object", reads, n, size)
	}
}

func TestPermissions(t *testing.T) {
	f := newFixture(t, 100_000, Config{BlockSize: 64 << 10})
	r := f.cache.Open(f.ref)
	f.readAll(r, 100_000, f.data)
	r.Close()
	filepath.WalkDir(f.cache.cfg.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if p != f.cache.cfg.Dir && fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
}

func TestReadaheadWindowsStayWithinCache(t *testing.T) {
	const max = 16 << 20
	f := newFixture(t, 24<<20, Config{BlockSize: 256 << 10, MaxBytes: max})
	var readers []*Reader
	for range 4 {
		r := f.cache.Open(f.ref)
		defer r.Close()
		readers = append(readers, r)
	}
	buf := make([]byte, 128<<10)
	for off := int64(0); off < 8<<20; off += int64(len(buf)) {
		for _, r := range readers {
			if _, err := r.ReadAt(context.Background(), buf, off); err != nil || !bytes.Equal(buf, f.data[off:off+int64(len(buf))]) {
				t.Fatalf("read at %d: %v", off, err)
			}
		}
		if w := f.cache.Stats().ReadaheadWindow; w > max/4 || w == 0 {
			t.Fatalf("readahead windows sum to %d, cache %d", w, max)
		}
	}
}
