package block

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// backingBytes reads the whole of a Backing file and closes it.
func backingBytes(t *testing.T, f *os.File) []byte {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	fl, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if errno != 0 || fl&syscall.O_ACCMODE != syscall.O_RDONLY {
		t.Fatalf("a backing file is not read-only (flags %#x, %v)", fl, errno)
	}
	return b
}

// TestBacking: a Reader hands out its object's data file only when every
// byte is present and verified; damage after sealing is found at the next
// Backing (the file's change time moved) and never handed out.
func TestBacking(t *testing.T) {
	const bs = 64 << 10
	const size = 5*bs + 777
	tests := []struct {
		name   string
		damage func(t *testing.T, o *object)
	}{
		{name: "flipped byte", damage: func(t *testing.T, o *object) { flip(t, o.dataPath(), 2*bs+5) }},
		{name: "truncated", damage: func(t *testing.T, o *object) { os.Truncate(o.dataPath(), 4*bs) }},
		{name: "block present but zero", damage: func(t *testing.T, o *object) { punch(t, o.dataPath(), bs, bs) }},
		{name: "record cleared", damage: func(t *testing.T, o *object) {
			fh, _ := os.OpenFile(o.idxPath(), os.O_RDWR, 0)
			defer fh.Close()
			fh.WriteAt(make([]byte, o.recLen), o.recOff(3))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{BlockSize: bs}
			f := newFixture(t, size, cfg)
			r := f.cache.Open(f.ref)
			defer r.Close()
			if _, _, _, ok := r.Backing(false); ok {
				t.Fatal("Backing of an object not cached")
			}
			buf := make([]byte, 100) // the last block alone (no readahead)
			if _, err := r.ReadAt(context.Background(), buf, size-100); err != nil {
				t.Fatal(err)
			}
			if _, _, _, ok := r.Backing(false); ok {
				t.Fatal("Backing of an object cached in part")
			}
			if err := f.cache.Prefetch(context.Background(), f.ref, nil); err != nil {
				t.Fatal(err)
			}
			b, _, _, ok := r.Backing(false)
			if !ok || !bytes.Equal(backingBytes(t, b), f.data) {
				t.Fatal("Backing of a whole object failed or differs")
			}
			if st := f.cache.Stats(); st.VerifiedBytes != 0 {
				t.Fatalf("verified %d bytes again that this process fetched", st.VerifiedBytes)
			}

			// Another process sharing the directory trusts the seal.
			cfg.Dir = f.cache.cfg.Dir
			c2 := f.open(cfg)
			r2 := c2.Open(f.ref)
			defer r2.Close()
			if b, _, _, ok := r2.Backing(false); !ok || !bytes.Equal(backingBytes(t, b), f.data) {
				t.Fatal("Backing of a sealed object in a second cache failed")
			}
			if st := c2.Stats(); st.VerifiedBytes != 0 {
				t.Fatalf("a second cache verified %d bytes of a sealed file", st.VerifiedBytes)
			}

			// Damage seen by a process that has the file open, and by a
			// process that opens it afterwards.
			tt.damage(t, f.cache.object(f.ref))
			c3 := f.open(cfg)
			for i, c := range []*Cache{c2, c3} {
				r3 := c.Open(f.ref)
				defer r3.Close()
				if b, _, _, ok := r3.Backing(false); ok && (i == 1 || tt.name != "record cleared") {
					b.Close()
					t.Fatalf("cache %d: Backing handed out a damaged file", i+2)
				} else if ok {
					b.Close() // its blocks are in memory, and its bytes intact
				}
			}
			// The next read repairs it; then it backs opens again.
			r3 := c3.Open(f.ref)
			defer r3.Close()
			f.readAll(r3, 50_000, f.data)
			if err := c3.Prefetch(context.Background(), f.ref, nil); err != nil {
				t.Fatal(err)
			}
			if b, _, _, ok := r3.Backing(false); !ok || !bytes.Equal(backingBytes(t, b), f.data) {
				t.Fatal("no Backing after the repair")
			}
			if c2.Stats().Corruptions+c3.Stats().Corruptions == 0 && tt.name != "record cleared" {
				t.Fatal("damage not counted")
			}
		})
	}
}

// TestBackingVerifiesUnsealed: a whole file without a valid seal (written
// by a process that died before sealing, or sealed in another boot) is
// checked in full before it backs an open, then sealed.
func TestBackingVerifiesUnsealed(t *testing.T) {
	const bs = 64 << 10
	cfg := Config{BlockSize: bs}
	f := newFixture(t, 3*bs+1, cfg)
	if err := f.cache.Prefetch(context.Background(), f.ref, nil); err != nil {
		t.Fatal(err)
	}
	o := f.cache.object(f.ref)
	fh, err := os.OpenFile(o.idxPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The last worker to publish its block seals the file (Prefetch may
	// return a moment before: it saw a record on disk first).
	waitFor(t, "the seal", func() bool { _, ok := readSeal(fh); return ok })
	seal := make([]byte, sealLen)
	fh.ReadAt(seal, sealOff)
	seal[5] ^= 1 // another boot
	fh.WriteAt(seal, sealOff)
	fh.Close()

	cfg.Dir = f.cache.cfg.Dir
	c2 := f.open(cfg)
	r := c2.Open(f.ref)
	defer r.Close()
	b, _, _, ok := r.Backing(false)
	if !ok || !bytes.Equal(backingBytes(t, b), f.data) {
		t.Fatal("Backing of a whole, unsealed object failed")
	}
	if got := c2.Stats().VerifiedBytes; got != f.ref.Size {
		t.Fatalf("verified %d bytes, want the whole object (%d)", got, f.ref.Size)
	}
	c3 := f.open(cfg)
	r3 := c3.Open(f.ref)
	defer r3.Close()
	if b, _, _, ok := r3.Backing(false); !ok {
		t.Fatal("no Backing after sealing")
	} else {
		b.Close()
	}
	if got := c3.Stats().VerifiedBytes; got != 0 {
		t.Fatalf("verified %d bytes of a freshly sealed object", got)
	}
}

// TestEvictedBackingKeepsReading: evicting an object whose file backs an
// open unlinks it; the open keeps reading it, and its bytes count against
// the limit until the Reader is closed.
func TestEvictedBackingKeepsReading(t *testing.T) {
	const bs = 64 << 10
	f := newFixture(t, 8*bs, Config{BlockSize: bs, MaxBytes: 1 << 20})
	r := f.cache.Open(f.ref)
	if err := f.cache.Prefetch(context.Background(), f.ref, nil); err != nil {
		t.Fatal(err)
	}
	b, _, _, ok := r.Backing(false)
	if !ok {
		t.Fatal("no Backing")
	}
	defer b.Close()
	// Another object, as large and backing an open too, pushes it out:
	// both are held, and it is the older.
	ref := f.put("other", randBytes(7, 8*bs))
	r2 := f.cache.Open(ref)
	defer r2.Close()
	// r2 holds the other object's file from its first block on (else it is
	// unheld between the Prefetch's fetches, and evicted first).
	if _, err := r2.ReadAt(context.Background(), make([]byte, 1), 8*bs-1); err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Prefetch(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	if b2, _, _, ok := r2.Backing(false); ok {
		b2.Close()
	}
	o := f.cache.object(f.ref)
	defer func() {
		if t.Failed() {
			t.Logf("stats %+v", f.cache.Stats())
		}
	}()
	waitFor(t, "the eviction", func() bool {
		_, err := os.Stat(o.dir)
		return os.IsNotExist(err)
	})
	if got, _ := io.ReadAll(io.NewSectionReader(b, 0, 1<<30)); !bytes.Equal(got, f.data) {
		t.Fatal("an evicted backing file no longer reads the object")
	}
	before := f.cache.Stats().BytesCached
	r.Close()
	waitFor(t, "the evicted bytes to leave the count", func() bool {
		return f.cache.Stats().BytesCached <= before-8*bs
	})
}

// TestLegacyLayoutRemoved: a cache directory of the segment layout (v2)
// is emptied at start, never read.
func TestLegacyLayoutRemoved(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "v2", "ab", "abcd")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "0"), []byte("segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, 1000, Config{Dir: dir})
	waitFor(t, "the old layout to go", func() bool {
		_, err := os.Stat(filepath.Join(dir, "v2"))
		return os.IsNotExist(err)
	})
	f.readAll(f.cache.Open(f.ref), 100, f.data)
}
