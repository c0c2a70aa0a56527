package block

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log sink safe for the cache's goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchDamage writes into a data file while it backs a passthrough
// open (as another process on the node could): the watch finds the file
// changed, checks it in full, and for real damage counts the bad blocks,
// logs the path once, drops the version (the next Reader fetches it
// again into a new file, under a new backing key) while the descriptor handed out keeps the
// damaged file. A change that leaves the bytes right (a chmod) is
// checked, sealed again and nothing is dropped.
func TestWatchDamage(t *testing.T) {
	const bs = 64 << 10
	const size = 6*bs + 321
	tests := []struct {
		name    string
		damage  func(t *testing.T, path string)
		bad     int64 // blocks counted as failing (0: no damage)
		zeroAt  int64 // an offset the held descriptor then reads as zero (-1: none)
		zeroLen int
	}{
		{name: "zeros written", damage: func(t *testing.T, p string) {
			fh, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			if _, err := fh.WriteAt(make([]byte, 2*bs), bs+100); err != nil {
				t.Fatal(err)
			}
		}, bad: 3, zeroAt: bs + 100, zeroLen: 2 * bs},
		{name: "truncated", damage: func(t *testing.T, p string) {
			if err := os.Truncate(p, 4*bs); err != nil {
				t.Fatal(err)
			}
		}, bad: 3, zeroAt: -1},
		{name: "extended", damage: func(t *testing.T, p string) {
			if err := os.Truncate(p, size+10); err != nil {
				t.Fatal(err)
			}
		}, bad: 1, zeroAt: -1},
		{name: "chmod only", damage: func(t *testing.T, p string) {
			if err := os.Chmod(p, 0o640); err != nil {
				t.Fatal(err)
			}
		}, bad: 0, zeroAt: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			f := newFixture(t, size, Config{BlockSize: bs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			c := f.cache
			r := c.Open(f.ref)
			defer r.Close()
			f.readAll(r, 1<<20, f.data)
			bf, key, _, ok := r.Backing(false)
			if !ok {
				t.Fatal("no backing file for a wholly read object")
			}
			defer bf.Close()
			path := r.o.dataPath()
			c.checkWatched() // unchanged: nothing to do
			if s := c.Stats(); s.Corruptions != 0 {
				t.Fatalf("an unchanged file counted %d failures", s.Corruptions)
			}
			verified := c.Stats().VerifiedBytes
			tt.damage(t, path)
			f.store.reset()
			c.checkWatched()
			s := c.Stats()
			if s.Corruptions != tt.bad {
				t.Errorf("checksum failures %d, want %d", s.Corruptions, tt.bad)
			}
			if s.VerifiedBytes == verified && tt.bad == 0 {
				t.Errorf("a changed file was not verified again")
			}
			_, statErr := os.Stat(path)
			if dropped := os.IsNotExist(statErr); dropped != (tt.bad > 0) {
				t.Errorf("data file removed %v (%v), want %v", dropped, statErr, tt.bad > 0)
			}
			if n := strings.Count(logs.String(), path); (n == 1) != (tt.bad > 0) || n > 1 {
				t.Errorf("the log names the path %d times, want %d:\n%s", n, map[bool]int{true: 1}[tt.bad > 0], logs.String())
			}
			c.checkWatched() // dropped files are not looked at again; sealed ones are quiet
			if got := c.Stats().Corruptions; got != tt.bad {
				t.Errorf("a second round counted %d failures, want %d", got, tt.bad)
			}
			if tt.zeroAt >= 0 {
				got := make([]byte, tt.zeroLen)
				if _, err := bf.ReadAt(got, tt.zeroAt); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, make([]byte, tt.zeroLen)) {
					t.Errorf("the descriptor handed out before the damage does not read the damaged file")
				}
			}
			r2 := c.Open(f.ref)
			defer r2.Close()
			f.readAll(r2, 1<<20, f.data)
			if reads, _, _ := f.store.stats(); (reads > 0) != (tt.bad > 0) {
				t.Errorf("%d GETs after the check, want them only after a drop", reads)
			}
			bf2, key2, _, ok := r2.Backing(false)
			if !ok {
				t.Fatalf("no backing file after the refetch: %s", backingState(c, r2))
			}
			defer bf2.Close()
			if (key2 != key) != (tt.bad > 0) {
				t.Errorf("backing key after the check %q, before %q: want a new one only after a drop", key2, key)
			}
			got := make([]byte, size)
			if _, err := bf2.ReadAt(got, 0); err != nil || !bytes.Equal(got, f.data) {
				t.Errorf("the new backing file does not hold the object (%v)", err)
			}
		})
	}
}

// TestWatchForgetsClosed: a file is watched while a Reader holds it.
func TestWatchForgetsClosed(t *testing.T) {
	f := newFixture(t, 200<<10, Config{BlockSize: 64 << 10})
	c := f.cache
	r := c.Open(f.ref)
	f.readAll(r, 1<<20, f.data)
	bf, _, _, ok := r.Backing(false)
	if !ok {
		t.Fatal("no backing file")
	}
	bf.Close()
	count := func() int {
		c.watch.mu.Lock()
		defer c.watch.mu.Unlock()
		return len(c.watch.files)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d files watched, want 1", n)
	}
	r.Close()
	// (a readahead fetch still running holds the file a moment longer)
	waitFor(t, "the watch to forget a file no Reader holds", func() bool {
		c.checkWatched()
		return count() == 0
	})
}

// backingState describes why r may have no backing file (for failures).
func backingState(c *Cache, r *Reader) string {
	h := r.file()
	if h == nil {
		return "not on disk"
	}
	defer r.unpin(h)
	f := h.f
	st, err := stampOf(f.data)
	c.mu.Lock()
	mapped := c.files[f.o.id] == f
	c.mu.Unlock()
	return fmt.Sprintf("have %d of %d blocks, stamp %+v (%v), size %d, mapped %v, gone %v, cold %v, loadAll %v",
		f.have.Load(), f.o.nblocks, st, err, f.o.ref.Size, mapped, f.gone, c.coldOf(f) != nil, f.loadAll(c))
}
