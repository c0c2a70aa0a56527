package block

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/hsm"
)

// coldFixture is a fixture whose cache hands out cold backing files (a
// pre-content listener over its directory).
func coldFixture(t *testing.T, size int, cfg Config) (*fixture, *hsm.Listener) {
	t.Helper()
	f := newFixture(t, size, cfg)
	l, err := hsm.Open(f.cache.cfg.Dir, nil)
	if err != nil {
		t.Fatalf("pre-content listener: %v (these tests need root and a cache dir on ext4, xfs or btrfs)", err)
	}
	f.cache.SetPrecontent(l)
	t.Cleanup(func() {
		f.cache.Close() // answers and drops its cold files first
		l.Close()
	})
	return f, l
}

// coldOpen opens a Reader of f's object and its cold backing file (both
// closed when the test ends).
func coldOpen(t *testing.T, f *fixture) (*Reader, *os.File) {
	t.Helper()
	r := f.cache.Open(f.ref)
	t.Cleanup(func() { r.Close() })
	b, _, _, ok := r.Backing(true)
	if !ok {
		t.Fatal("no cold backing file")
	}
	t.Cleanup(func() { b.Close() })
	return r, b
}

// onlyColdFile returns f's cache's one cold file.
func onlyColdFile(f *fixture) *coldFile {
	f.cache.coldMu.Lock()
	defer f.cache.coldMu.Unlock()
	for _, c := range f.cache.cold {
		return c
	}
	return nil
}

// readBacking reads all of b in reads of n bytes at once (as the kernel
// reads a passthrough backing file) and compares with want.
func readBacking(t *testing.T, b *os.File, n int, want []byte) {
	t.Helper()
	got, err := io.ReadAll(io.NewSectionReader(b, 0, int64(len(want))+1))
	if err != nil {
		t.Fatalf("reading the backing file: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the backing file read %d bytes that differ from the object's %d", len(got), len(want))
	}
	_ = n
}

func TestColdBacking(t *testing.T) {
	f, l := coldFixture(t, 5<<20+123, Config{BlockSize: 1 << 20})
	r := f.cache.Open(f.ref)
	b, key, _, ok := r.Backing(true)
	if !ok {
		t.Fatal("no cold backing file for an object not in the cache")
	}
	defer b.Close()
	r.NotePassthrough() // as the FUSE layer does once the open passes through
	if st := f.cache.Stats(); st.ColdOpens != 1 || st.ColdFiles != 1 {
		t.Fatalf("stats %+v: want one cold open and file", st)
	}
	readBacking(t, b, 128<<10, f.data)
	if ev := l.Stats(); ev.Events == 0 || ev.Denied != 0 {
		t.Fatalf("listener %+v: want events, none denied", ev)
	}
	// Whole now: its events end, and a second Reader shares the file.
	waitFor(t, "the file whole", func() bool {
		f.cache.coldMu.Lock()
		defer f.cache.coldMu.Unlock()
		for _, cf := range f.cache.cold {
			cf.mu.Lock()
			w := cf.whole
			cf.mu.Unlock()
			return w
		}
		return false
	})
	before := l.Stats().Events
	readBacking(t, b, 4096, f.data)
	if n := l.Stats().Events - before; n != 0 {
		t.Fatalf("%d events reading a whole file", n)
	}
	r2 := f.cache.Open(f.ref)
	b2, key2, _, ok := r2.Backing(true)
	if !ok || key2 != key {
		t.Fatalf("second Backing: ok %v key %q, want the first's %q", ok, key2, key)
	}
	b2.Close()
	r2.Close()
	r.Close()
	if st := f.cache.Stats(); st.ColdFiles != 0 {
		t.Fatalf("%d cold files after the last Reader closed a whole one", st.ColdFiles)
	}
	if reads, _, _ := f.store.stats(); reads == 0 {
		t.Fatal("no GET")
	}
}

// TestColdFetchFails: a range whose fetch fails is never read as zeros.
func TestColdFetchFails(t *testing.T) {
	f, _ := coldFixture(t, 3<<20, Config{BlockSize: 1 << 20})
	_, b := coldOpen(t, f)
	// The object changes in the store: the fetch of this version fails.
	f.put("obj", randBytes(7, 3<<20))
	_, err := b.ReadAt(make([]byte, 4096), 1<<20)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a range that cannot be fetched: %v, want EIO", err)
	}
}

// TestColdEvictedWhileOpen: the kernel keeps reading the file it was
// given after the evictor replaced it; its holes are filled all the same.
func TestColdEvictedWhileOpen(t *testing.T) {
	f, _ := coldFixture(t, 4<<20, Config{BlockSize: 1 << 20})
	r, b := coldOpen(t, f)
	head := make([]byte, 1<<20)
	if _, err := b.ReadAt(head, 0); err != nil || !bytes.Equal(head, f.data[:1<<20]) {
		t.Fatalf("first block: %v", err)
	}
	f.cache.evict(1 << 62) // everything, held files too
	if _, err := os.Stat(filepath.Join(r.o.dir, dataName)); !os.IsNotExist(err) {
		t.Fatalf("the object was not evicted: %v", err)
	}
	readBacking(t, b, 1<<20, f.data)
}

// TestColdDamagedBlock: a present block whose bytes were damaged on disk
// is checked before the kernel may read it, and fetched again.
func TestColdDamagedBlock(t *testing.T) {
	cfg := Config{BlockSize: 1 << 20}
	f, _ := coldFixture(t, 3<<20, cfg)
	// Another process caches the object, then its block 1 is damaged.
	cfg.Dir = f.cache.cfg.Dir
	other := f.open(cfg)
	ro := other.Open(f.ref)
	f.readAll(ro, 1<<20, f.data)
	ro.Close()
	other.Close()
	data, err := os.OpenFile(filepath.Join(f.cache.object(f.ref).dir, dataName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data.WriteAt([]byte("damage"), 1<<20+5000)
	data.Close()
	r := f.cache.Open(f.ref)
	defer r.Close()
	b, _, _, ok := r.Backing(true)
	if !ok {
		t.Fatal("no backing file")
	}
	defer b.Close()
	r.NotePassthrough()
	readBacking(t, b, 4096, f.data)
	if st := f.cache.Stats(); st.Corruptions == 0 || st.ColdOpens != 1 {
		t.Fatalf("stats %+v: want the damage found and a cold open", st)
	}
}

// TestColdReadersKept: processes that read one cold file in turn (their
// events come round robin) keep their readahead state from one event to
// the next while they are no more than coldReaders (32 fio jobs once found
// theirs closed at every event, with 16); beyond it, the state stays
// bounded.
func TestColdReadersKept(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs int
		kept  bool // each process keeps its state
	}{
		{"one", 1, true},
		{"32 fio jobs", 32, true},
		{"as many as kept", coldReaders, true},
		{"more than kept", coldReaders + 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := coldFixture(t, 8<<20, Config{BlockSize: 1 << 20})
			coldOpen(t, f)
			cf := onlyColdFile(f)
			first := map[int32]*coldReader{}
			for round := range 4 {
				for i := range tc.procs {
					pid := int32(1000 + i)
					cr := cf.reader(pid)
					if cr == nil {
						t.Fatal("no reader state: the cold file was dropped")
					}
					cr.rd.observe(int64(round)*4096, 4096)
					cf.done(cr)
					if round == 0 {
						first[pid] = cr
					} else if tc.kept && first[pid] != cr {
						t.Fatalf("round %d: process %d's readahead state was closed and made anew", round, pid)
					}
				}
			}
			cf.mu.Lock()
			n := len(cf.readers)
			cf.mu.Unlock()
			if want := min(tc.procs, coldReaders); n != want {
				t.Errorf("%d reader states kept, want %d", n, want)
			}
		})
	}
}

// TestColdManyReaders: more reading processes than coldReaders at once
// (32 fio jobs): every fill succeeds (a reader's readahead state is never
// closed under it).
func TestColdManyReaders(t *testing.T) {
	f, _ := coldFixture(t, 8<<20, Config{BlockSize: 1 << 20})
	f.store.delay = 5 * time.Millisecond
	coldOpen(t, f)
	cf := onlyColdFile(f)
	var wg sync.WaitGroup
	errs := make(chan error, 4*coldReaders)
	for i := range 4 * coldReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := int32(1000 + i)
			off := int64(i) * 4096 * 61 % (8 << 20)
			cf.Ready(off, 4096, pid)
			if err := cf.Fill(context.Background(), off, 4096, pid); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("fill: %v", err)
	}
}
