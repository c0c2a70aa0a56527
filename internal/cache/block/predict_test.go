package block

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// TestPredict: a prediction fetches the object's first bytes (whole
// blocks) into the cache at once; the ledger counts what the task then
// reads as hits and what it never reads as wasted, once settled.
func TestPredict(t *testing.T) {
	const bs = 64 << 10
	tests := []struct {
		name     string
		size     int
		upto     int64
		read     int64 // bytes the task reads from the start (-1: none)
		cached   int64 // in the cache after the prediction
		hit      int64
		wasted   int64
		noReader bool
	}{
		{name: "small object whole, read", size: 10_000, upto: 10_000, read: 10_000, cached: 10_000, hit: 10_000},
		{name: "small object whole, never read", size: 10_000, upto: 10_000, read: -1, cached: 10_000, wasted: 10_000},
		{name: "first block of a larger one", size: 5 * bs, upto: bs, read: bs, cached: bs, hit: bs},
		{name: "three blocks, one read", size: 3*bs + 5, upto: 3*bs + 5, read: 100, cached: 3*bs + 5, hit: bs, wasted: 2*bs + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.size, Config{BlockSize: bs})
			p := f.cache.Predict(f.ref, tt.upto, 0)
			if p == nil {
				t.Fatal("Predict returned nil")
			}
			waitFor(t, "the prediction to land", func() bool { return f.cache.PredictStats().PredictedBytes == tt.cached })
			if got := f.cache.Cached(f.ref); got != tt.cached {
				t.Fatalf("cached %d bytes, want %d", got, tt.cached)
			}
			reads, _, _ := f.store.stats()
			if reads != 1 {
				t.Errorf("%d GETs, want 1", reads)
			}
			if tt.read >= 0 {
				r := f.cache.Open(f.ref)
				buf := make([]byte, tt.read)
				if _, err := r.ReadAt(context.Background(), buf, 0); err != nil {
					t.Fatal(err)
				}
				r.Close()
			}
			st := f.cache.SettlePredictions()
			if st.Files != 1 || st.HitBytes != tt.hit || st.WastedBytes != tt.wasted || st.PendingBytes != 0 {
				t.Errorf("stats %+v, want 1 file, hit %d, wasted %d", st, tt.hit, tt.wasted)
			}
		})
	}
}

// TestPredictSkips: nothing is fetched for a cancelled prediction, under
// the free-space floor, for an empty object, for one already cached; a
// deleted object is skipped without an error anywhere.
func TestPredictSkips(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		prepare func(f *fixture) Ref
		cancel  bool
		tried   bool // a GET is tried (and fails)
		wantNil bool
		cached  func(Ref) int64 // bytes of it in the cache at the end
	}{
		{name: "below the free-space floor", cfg: Config{MinFreeBytes: 1 << 62}, wantNil: true, cached: none,
			prepare: func(f *fixture) Ref { return f.ref }},
		{name: "empty object", wantNil: true, cached: none,
			prepare: func(f *fixture) Ref { return f.put("empty", nil) }},
		{name: "deleted since listed", cached: none, tried: true,
			prepare: func(f *fixture) Ref {
				if err := f.store.Delete(context.Background(), "obj", objstore.DeleteOptions{}); err != nil {
					f.t.Fatal(err)
				}
				return f.ref
			}},
		{name: "already cached", cached: func(r Ref) int64 { return r.Size },
			prepare: func(f *fixture) Ref {
				r := f.cache.Open(f.ref)
				f.readAll(r, 4096, f.data)
				r.Close()
				f.store.reset()
				return f.ref
			}},
		{name: "cancelled before it ran", cancel: true, cached: none,
			prepare: func(f *fixture) Ref {
				f.store.delay = 200 * time.Millisecond // the first predictions keep the workers busy
				for i := range 3 * f.cache.predictParallel() {
					f.cache.Predict(f.put(fmt.Sprintf("o%d", i), []byte("x")), 1, 0)
				}
				f.store.reset()
				return f.ref
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 100_000, tt.cfg)
			ref := tt.prepare(f)
			p := f.cache.Predict(ref, ref.Size, 0)
			if (p == nil) != tt.wantNil {
				t.Fatalf("Predict = %v, want nil %v", p, tt.wantNil)
			}
			if tt.cancel {
				p.Cancel()
			}
			// Every prediction has run (or was dropped) once the queue is empty.
			waitFor(t, "the predictions to finish", f.predictionsDone)
			if !tt.cancel && !tt.tried { // the others fetch their own objects meanwhile
				for _, rg := range f.store.ranges {
					t.Errorf("fetched [%d, +%d) of %s", rg[0], rg[1], ref.Key)
				}
			}
			if got, want := f.cache.Cached(ref), tt.cached(ref); got != want {
				t.Errorf("%d bytes of %s cached, want %d", got, ref.Key, want)
			}
			if st := f.cache.PredictStats(); st.PredictedBytes > 3*int64(f.cache.predictParallel()) {
				t.Errorf("stats %+v: the object counted as predicted", st)
			}
		})
	}
}

func none(Ref) int64 { return 0 }

// predictionsDone reports whether no prediction runs or waits.
func (f *fixture) predictionsDone() bool {
	f.cache.pred.mu.Lock()
	defer f.cache.pred.mu.Unlock()
	return f.cache.pred.running == 0 && f.cache.pred.runningSmall == 0
}

// TestPredictParallel: predictions of objects larger than smallObject
// run at most predictParallel at once, leaving fetch workers for demand
// reads; those of small objects run on the small workers too, at most
// predictParallel + nworkers at once; a demand read is served while
// they run.
func TestPredictParallel(t *testing.T) {
	tests := []struct {
		name string
		size int
		most func(c *Cache) int // predictions at once, at most
	}{
		{name: "small objects", size: 9, most: func(c *Cache) int { return c.predictParallel() + c.nworkers }},
		{name: "large objects", size: smallObject + 1, most: func(c *Cache) int { return c.predictParallel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1000, Config{MaxConcurrency: 8})
			f.store.delay = 50 * time.Millisecond
			for i := range 40 {
				f.cache.Predict(f.put(fmt.Sprintf("p%02d", i), bytes.Repeat([]byte("p"), tt.size)), 100, 0)
			}
			r := f.cache.Open(f.ref)
			f.readAll(r, 4096, f.data) // a demand read among them
			r.Close()
			waitFor(t, "40 predictions", func() bool { return f.cache.PredictStats().Files == 40 })
			waitFor(t, "the predictions to finish", f.predictionsDone)
			// At most want predictions, the read, and one GET whose body is
			// still being closed after the prediction it served moved on.
			want := tt.most(f.cache)
			if _, _, most := f.store.stats(); most > want+2 || most < min(40, want)/2 {
				t.Errorf("%d GETs at once, want at most %d predictions and the read (and more than half that)", most, want)
			}
		})
	}
}

// TestSmallObjectOneGET: the first read of an object that fits in a
// part, at its start, fetches all of it with one GET; a larger object
// is fetched as before (the block, then readahead).
func TestSmallObjectOneGET(t *testing.T) {
	const bs = 64 << 10
	tests := []struct {
		name  string
		size  int
		reads int // GETs after reading it whole in 4 KiB reads
	}{
		{name: "one block", size: 1000, reads: 1},
		{name: "a part", size: 4 * bs, reads: 1},
		{name: "beyond a part", size: 4*bs + 1, reads: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.size, Config{BlockSize: bs, PartSize: 4 * bs})
			r := f.cache.Open(f.ref)
			f.readAll(r, 4096, f.data)
			r.Close()
			if reads, _, _ := f.store.stats(); reads != tt.reads {
				t.Errorf("%d GETs (%v), want %d", reads, f.store.ranges, tt.reads)
			}
		})
	}
}

// TestPredictOrder: waiting predictions run nearest first (by rank),
// then oldest first.
func TestPredictOrder(t *testing.T) {
	f := newFixture(t, 10, Config{MaxConcurrency: 1})
	gate := make(chan struct{})
	first := f.put("first", bytes.Repeat([]byte("x"), smallObject+1))
	f.store.delay = 0
	// One worker: the first prediction holds it while the others queue
	// (objects larger than smallObject: the small workers do not take them).
	block := &gatedStore{Store: f.store, release: gate, gates: map[string]int64{"first": 0}}
	first.Store = block
	f.cache.Predict(first, 1, 0)
	waitFor(t, "the first GET", func() bool { return len(block.log()) == 1 })
	want := []string{"r0a", "r0b", "r1", "r2"}
	for _, k := range []struct {
		key  string
		rank int
	}{{"r2", 2}, {"r0a", 0}, {"r1", 1}, {"r0b", 0}} {
		ref := f.put(k.key, bytes.Repeat([]byte("y"), smallObject+1))
		ref.Store = block
		f.cache.Predict(ref, 1, k.rank)
	}
	close(gate)
	waitFor(t, "every prediction", func() bool { return len(block.log()) == 5 })
	var got []string
	for _, g := range block.log()[1:] {
		got = append(got, g[:strings.IndexByte(g, '@')])
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("order %v, want %v", got, want)
	}
}
