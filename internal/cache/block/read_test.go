package block

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func TestReadAtEveryOffset(t *testing.T) {
	const size = 3<<20 + 12345
	tests := []struct {
		name   string
		cfg    Config
		shared bool // one Reader for all goroutines (FUSE's concurrent reads on a handle)
	}{
		{name: "64KiB blocks, reader per goroutine", cfg: Config{BlockSize: 64 << 10, PartSize: 256 << 10}},
		{name: "64KiB blocks, shared reader", cfg: Config{BlockSize: 64 << 10}, shared: true},
		{name: "1MiB blocks, small cache", cfg: Config{MaxBytes: 2 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, size, tt.cfg)
			shared := f.cache.Open(f.ref)
			defer shared.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := shared
					if !tt.shared {
						r = f.cache.Open(f.ref)
						defer r.Close()
					}
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					buf := make([]byte, 300<<10)
					for range 150 {
						off := rng.Int64N(size + 10)
						n := rng.IntN(len(buf)) + 1
						if rng.IntN(4) == 0 {
							n = rng.IntN(5000) + 1
						}
						m, err := r.ReadAt(context.Background(), buf[:n], off)
						wantN := max(0, min(int64(n), size-off))
						if m != int(wantN) {
							errs <- errors.New("short read")
							return
						}
						if wantN < int64(n) && err != io.EOF || wantN == int64(n) && err != nil {
							errs <- err
							return
						}
						if off = min(off, size); !bytes.Equal(buf[:m], f.data[off:off+int64(m)]) {
							errs <- errors.New("wrong bytes")
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("offset %v", err)
			}
			f.readAll(shared, 128<<10, f.data)
		})
	}
}

func TestReadAtEdges(t *testing.T) {
	f := newFixture(t, 100_000, Config{BlockSize: 64 << 10})
	r := f.cache.Open(f.ref)
	defer r.Close()
	ctx := context.Background()
	tests := []struct {
		name    string
		off     int64
		n       int
		wantN   int
		wantErr error
	}{
		{name: "start", off: 0, n: 10, wantN: 10},
		{name: "across blocks", off: 65530, n: 20, wantN: 20},
		{name: "to end exactly", off: 99_990, n: 10, wantN: 10},
		{name: "past end", off: 99_990, n: 20, wantN: 10, wantErr: io.EOF},
		{name: "at end", off: 100_000, n: 5, wantN: 0, wantErr: io.EOF},
		{name: "beyond end", off: 200_000, n: 5, wantN: 0, wantErr: io.EOF},
		{name: "empty buffer", off: 5, n: 0, wantN: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, tt.n)
			n, err := r.ReadAt(ctx, buf, tt.off)
			if n != tt.wantN || err != tt.wantErr {
				t.Fatalf("ReadAt = %d, %v; want %d, %v", n, err, tt.wantN, tt.wantErr)
			}
			if off := min(tt.off, int64(len(f.data))); !bytes.Equal(buf[:n], f.data[off:off+int64(n)]) {
				t.Fatal("wrong bytes")
			}
		})
	}
	if _, err := r.ReadAt(ctx, make([]byte, 1), -1); err == nil {
		t.Fatal("negative offset: no error")
	}

	empty := f.put("empty", nil)
	er := f.cache.Open(empty)
	defer er.Close()
	if n, err := er.ReadAt(ctx, make([]byte, 4), 0); n != 0 || err != io.EOF {
		t.Fatalf("empty object: %d, %v", n, err)
	}
}

func TestStoreErrors(t *testing.T) {
	f := newFixture(t, 1<<20, Config{BlockSize: 64 << 10})
	ctx := context.Background()

	changed := f.put("changing", []byte("version one, long enough to span nothing"))
	if _, err := f.store.Put(ctx, "changing", bytes.NewReader([]byte("version two")), 11, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	missing := f.ref
	missing.Key = "missing"

	tests := []struct {
		name string
		ref  Ref
		want error
	}{
		{name: "object changed", ref: changed, want: objstore.ErrPrecondition},
		{name: "object gone", ref: missing, want: objstore.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.cache.Open(tt.ref)
			defer r.Close()
			_, err := r.ReadAt(ctx, make([]byte, 4), 2)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestTransientFailuresRetried(t *testing.T) {
	tests := []struct {
		name        string
		short, fail int
		wantErr     bool
	}{
		{name: "short body once", short: 1},
		{name: "503 once", fail: 1},
		{name: "short body every time", short: 100, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 256<<10, Config{BlockSize: 64 << 10})
			f.store.shortOnce, f.store.failOnce = tt.short, tt.fail
			r := f.cache.Open(f.ref)
			defer r.Close()
			buf := make([]byte, 1000)
			n, err := r.ReadAt(context.Background(), buf, 200_000) // past the first half: a short body of the whole object lacks it
			if tt.wantErr {
				if err == nil || !errors.Is(err, errShortBody) {
					t.Fatalf("err = %v, want a short-body error", err)
				}
				return
			}
			if err != nil || n != len(buf) || !bytes.Equal(buf, f.data[200_000:201_000]) {
				t.Fatalf("ReadAt = %d, %v (bytes equal: %v)", n, err, bytes.Equal(buf, f.data[200_000:201_000]))
			}
		})
	}
}

func TestCachedFile(t *testing.T) {
	f := newFixture(t, 200_000, Config{BlockSize: 64 << 10})
	r := f.cache.Open(f.ref)
	defer r.Close()
	if _, _, ok := r.CachedFile(0, 4096); ok {
		t.Fatal("CachedFile hit before anything was read")
	}
	f.readAll(r, 50_000, f.data)
	tests := []struct {
		name   string
		off, n int64
		ok     bool
	}{
		{name: "inside a block", off: 70_000, n: 4096, ok: true},
		{name: "whole block", off: 65536, n: 65536, ok: true},
		{name: "tail, clipped at EOF", off: 199_000, n: 4096, ok: true},
		{name: "across blocks", off: 65000, n: 4096, ok: true},
		{name: "across three blocks", off: 65000, n: 100_000, ok: true},
		{name: "past EOF", off: 200_000, n: 1, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, fo, ok := r.CachedFile(tt.off, tt.n)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			n := min(tt.n, int64(len(f.data))-tt.off)
			buf := make([]byte, n)
			if _, err := file.ReadAt(buf, fo); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, f.data[tt.off:tt.off+n]) {
				t.Fatal("file bytes differ from the object's")
			}
		})
	}
}

func TestClosed(t *testing.T) {
	f := newFixture(t, 100_000, Config{BlockSize: 64 << 10})
	r := f.cache.Open(f.ref)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Reader.Close: %v", err)
	}
	r2 := f.cache.Open(f.ref)
	f.cache.Close()
	if _, err := r2.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Cache.Close: %v", err)
	}
	if err := f.cache.Prefetch(context.Background(), f.ref, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Prefetch after Cache.Close: %v", err)
	}
	r2.Close()
}

// TestCacheWriteFailureReadsAround: when the cache cannot store a block,
// reads still succeed, straight from the store.
func TestCacheWriteFailureReadsAround(t *testing.T) {
	f := newFixture(t, 300_000, Config{BlockSize: 64 << 10})
	o := f.cache.object(f.ref)
	if err := os.MkdirAll(filepath.Dir(o.dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.dir, nil, 0o600); err != nil { // a file where the object's directory goes
		t.Fatal(err)
	}
	r := f.cache.Open(f.ref)
	defer r.Close()
	f.readAll(r, 50_000, f.data)
	if st := f.cache.Stats(); st.DirectBytes == 0 {
		t.Fatalf("stats %+v: no direct reads", st)
	}
}
