package block

import (
	"context"
	"testing"
	"time"
)

// requested is the sum of the lengths of the GETs f's store was asked for.
func requested(f *fixture) int64 {
	s := f.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range s.ranges {
		n += r[1]
	}
	return n
}

// TestColdFillFollowsReaders: the background fill of a cold passthrough
// file starts once a process reads it in order past fillAfter, and stops
// when its readers close, unless random reads asked for it (then it
// fetches the whole object): a header read of a big file does not
// download the file.
func TestColdFillFollowsReaders(t *testing.T) {
	const size = 64 << 20
	cases := []struct {
		name  string
		reads []int64 // offsets of 64 KiB reads of the backing file, in order
		whole bool    // the whole object is fetched after the close
		most  int64   // else: at most this many bytes requested
	}{
		// The first read's readahead window (4 MiB) and nothing more.
		{name: "header read", reads: []int64{0}, most: 5 << 20},
		// The fill starts, and its in-flight parts end it: 8 parts of
		// 1 MiB ahead of the reader's window, and one top-up at most.
		{name: "read in order, then closed", reads: seq(0, 2<<20, 64<<10), most: 24 << 20},
		{name: "random reads", reads: []int64{30 << 20, 10 << 20, 50 << 20}, whole: true},
		{name: "in order, then random", reads: append(seq(0, 2<<20, 64<<10), 40<<20), whole: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := coldFixture(t, size, Config{BlockSize: 1 << 20, PartSize: 1 << 20, FillRandomUpTo: size})
			f.store.delay = 100 * time.Millisecond
			r := f.cache.Open(f.ref)
			b, _, _, ok := r.Backing(true)
			if !ok {
				t.Fatal("no cold backing file")
			}
			buf := make([]byte, 64<<10)
			for _, off := range tc.reads {
				if _, err := b.ReadAt(buf, off); err != nil {
					t.Fatalf("read at %d: %v", off, err)
				}
				if want := f.data[off : off+int64(len(buf))]; string(buf) != string(want) {
					t.Fatalf("read at %d: wrong bytes", off)
				}
			}
			b.Close()
			r.Close()
			if tc.whole {
				waitFor(t, "the whole object fetched", func() bool { return requested(f) >= size })
				return
			}
			// In-flight GETs end; nothing new starts.
			waitFor(t, "no GET in flight", func() bool {
				f.store.mu.Lock()
				defer f.store.mu.Unlock()
				return f.store.inflight == 0
			})
			time.Sleep(300 * time.Millisecond)
			if n := requested(f); n > tc.most {
				t.Errorf("%d bytes requested after the readers closed, want at most %d", n, tc.most)
			}
			f.cache.mu.Lock()
			st, running := f.cache.fills[r.o.id]
			f.cache.mu.Unlock()
			if running && st.at.IsZero() {
				t.Error("the background fill still runs after its readers closed")
			}
		})
	}
}

// seq is the offsets from..to (exclusive) in steps of step.
func seq(from, to, step int64) []int64 {
	var s []int64
	for off := from; off < to; off += step {
		s = append(s, off)
	}
	return s
}

// TestClosedReaderStopsGets: once the Reader that queued a fetch has
// closed and no read shares it, a GET in flight stops at the next block
// (abandoned): a short read in order through ferry, or of a cold
// passthrough file whose fill it started, does not download the parts
// already on their way (8 MiB each) for nobody.
func TestClosedReaderStopsGets(t *testing.T) {
	const size, readMiB = 64 << 20, 6
	cases := []struct {
		name string
		cold bool // through the cold backing file (its events start the fill)
	}{
		{name: "readahead through ferry"},
		{name: "cold passthrough fill", cold: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{BlockSize: 1 << 20, PartSize: 8 << 20, FillRandomUpTo: size}
			var f *fixture
			if tc.cold {
				f, _ = coldFixture(t, size, cfg)
			} else {
				f = newFixture(t, size, cfg)
			}
			f.store.bodyDelay = 2 * time.Millisecond // 32 MiB/s per GET
			r := f.cache.Open(f.ref)
			buf := make([]byte, 64<<10)
			read := func(off int64) (int, error) { return r.ReadAt(context.Background(), buf, off) }
			if tc.cold {
				b, _, _, ok := r.Backing(true)
				if !ok {
					t.Fatal("no cold backing file")
				}
				defer b.Close()
				read = func(off int64) (int, error) { return b.ReadAt(buf, off) }
			}
			for _, off := range seq(0, readMiB<<20, 64<<10) {
				if _, err := read(off); err != nil {
					t.Fatalf("read at %d: %v", off, err)
				}
				if string(buf) != string(f.data[off:off+int64(len(buf))]) {
					t.Fatalf("read at %d: wrong bytes", off)
				}
			}
			if req := requested(f); req < 12<<20 {
				t.Fatalf("only %d bytes requested while reading: the test wants GETs of parts in flight", req)
			}
			_, before, _ := f.store.stats()
			f.store.mu.Lock()
			inflight := f.store.inflight
			f.store.mu.Unlock()
			r.Close()
			waitFor(t, "no GET in flight", func() bool {
				f.store.mu.Lock()
				defer f.store.mu.Unlock()
				return f.store.inflight == 0
			})
			_, after, _ := f.store.stats()
			t.Logf("%d bytes downloaded after the close, %d GETs in flight then", after-before, inflight)
			// Each GET in flight at the close (and one starting then)
			// ends at its next block (1 MiB).
			if most := int64(inflight+1) * 2 << 20; after-before > most {
				t.Errorf("%d bytes downloaded after the close (%d GETs in flight then), want at most %d", after-before, inflight, most)
			}
		})
	}
}
