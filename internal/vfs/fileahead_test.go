package vfs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// faEnv is a file system with directory readahead over one mem bucket.
type faEnv struct {
	t  *testing.T
	fs *FS
	bc *block.Cache
	st *countStore
}

func newFAEnv(t *testing.T, on bool, cacheBytes int64) *faEnv {
	t.Helper()
	st := &countStore{Store: mem.New(mem.Options{Bucket: "bkt"})}
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	fs, _, bc := newTestFSOpts(t, resolve, 100000, cacheBytes, Options{DirReadahead: on})
	return &faEnv{t: t, fs: fs, bc: bc, st: st}
}

func (e *faEnv) put(key string, size int) {
	e.t.Helper()
	body := bytes.Repeat([]byte{byte(len(key))}, size)
	if _, err := e.st.Store.Put(context.Background(), key, bytes.NewReader(body), int64(size), objstore.PutOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// cat opens p as process pid and reads it whole; it returns the bytes read.
func (e *faEnv) cat(pid uint32, p string) int64 {
	e.t.Helper()
	ctx := WithCaller(context.Background(), Caller{Pid: pid})
	h, err := e.fs.Open(ctx, p, OpenFlags{})
	if err != nil {
		e.t.Fatalf("open %s: %v", p, err)
	}
	defer h.Release()
	buf := make([]byte, 128<<10)
	var off int64
	for {
		n, err := h.Read(ctx, buf, off)
		off += int64(n)
		if err != nil {
			e.t.Fatalf("read %s: %v", p, err)
		}
		if n < len(buf) {
			return off
		}
	}
}

// cachedBytes returns how much of the object key the block cache holds.
func (e *faEnv) cachedBytes(key string) int64 {
	info, err := e.st.Store.Stat(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.bc.Cached(block.Ref{Store: e.st, StoreID: "s3/bkt", Key: key, Version: info.Version, Size: info.Size})
}

// waitCached waits until the block cache holds want bytes of key
// (predicted: nothing else reads it). The timeout only bounds a failure.
func (e *faEnv) waitCached(key string, want int64) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.cachedBytes(key) < want {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %d bytes cached, want %d (not predicted)", key, e.cachedBytes(key), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *faEnv) readdir(p string) {
	e.t.Helper()
	if _, err := e.fs.Readdir(context.Background(), p); err != nil {
		e.t.Fatalf("readdir %s: %v", p, err)
	}
}

func (e *faEnv) budgetUsed() (int64, int) {
	e.fs.fahead.mu.Lock()
	defer e.fs.fahead.mu.Unlock()
	return e.fs.fahead.bytes, len(e.fs.fahead.dirs)
}

// TestDirReadaheadPredicts: a process reading the files of a directory
// in order finds the next ones fetched before it opens them (whole up to
// faFileMax, the first block beyond), in nested trees in find order too;
// everything predicted is then read.
func TestDirReadaheadPredicts(t *testing.T) {
	tests := []struct {
		name  string
		files []string // keys, in the order the process opens them
		size  func(key string) int
		dirs  []string           // listed first (as find does)
		pid   func(i int) uint32 // the process opening files[i]; nil: one process
		// ahead: after opening files[i] (i >= 2), files[i+1] is fetched
		// up to this many bytes before it is opened.
		ahead func(size int) int64
	}{
		{
			name:  "small files of one directory",
			files: names("d/f%03d", 60),
			size:  func(string) int { return 1000 },
			dirs:  []string{"d"},
			ahead: func(size int) int64 { return int64(size) },
		},
		{
			name: "nested tree in find order",
			files: append(append(append(names("t/a%02d", 5), names("t/m/b%02d", 5)...),
				names("t/m/n/c%02d", 3)...), names("t/z%02d", 5)...),
			size:  func(string) int { return 3000 },
			dirs:  []string{"t", "t/m", "t/m/n"},
			ahead: func(size int) int64 { return int64(size) },
		},
		{
			name:  "batches of processes (xargs -n 20)",
			files: names("x/f%03d", 60),
			size:  func(string) int { return 1000 },
			dirs:  []string{"x"},
			pid:   func(i int) uint32 { return uint32(100 + i/20) },
			ahead: func(size int) int64 { return int64(size) },
		},
		{
			name:  "numbered files in natural order",
			files: names("n/c%d", 30),
			size:  func(string) int { return 2000 },
			dirs:  []string{"n"},
			ahead: func(size int) int64 { return int64(size) },
		},
		{
			name:  "large files get their first block",
			files: names("big/g%02d", 6),
			size:  func(string) int { return faFileMax + 5000 },
			dirs:  []string{"big"},
			ahead: func(int) int64 { return block.DefaultBlockSize },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFAEnv(t, true, 1<<30)
			for _, k := range tt.files {
				e.put(k, tt.size(k))
			}
			for _, d := range tt.dirs {
				e.readdir("s3/bkt/" + d)
			}
			var read int64
			for i, k := range tt.files {
				if i > 2 {
					e.waitCached(k, tt.ahead(tt.size(k)))
				}
				pid := uint32(7)
				if tt.pid != nil {
					pid = tt.pid(i)
				}
				read += e.cat(pid, "s3/bkt/"+k)
			}
			st := e.bc.SettlePredictions()
			if st.PredictedBytes == 0 || st.WastedBytes != 0 || st.PredictedBytes > read {
				t.Errorf("predicted %d bytes, wasted %d, read %d: want some predicted, all of them read", st.PredictedBytes, st.WastedBytes, read)
			}
			if b, d := e.budgetUsed(); b != 0 || d != 0 {
				t.Errorf("budget still holds %d bytes in %d dirs after every prediction was opened", b, d)
			}
		})
	}
}

func names(format string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// TestDirReadaheadBounds: what is not a sequential read predicts nothing
// or little; a broken prediction collapses and returns its budget; the
// budgets hold; deleted objects and writes in the directory are no
// errors; off is off.
func TestDirReadaheadBounds(t *testing.T) {
	tests := []struct {
		name string
		on   bool
		run  func(e *faEnv) (read int64)
		// check runs after the reads, before SettlePredictions.
		check func(t *testing.T, e *faEnv, read int64, st block.PredictStats)
	}{
		{
			name: "random tenth of a directory",
			on:   true,
			run: func(e *faEnv) int64 {
				rng := rand.New(rand.NewPCG(1, 2))
				var read int64
				for _, i := range rng.Perm(500)[:50] {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if st.WastedBytes > read {
					t.Errorf("wasted %d bytes predicting, read %d", st.WastedBytes, read)
				}
			},
		},
		{
			name: "a jump collapses the stream",
			on:   true,
			run: func(e *faEnv) int64 {
				var read int64
				for i := range 6 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
				}
				if b, _ := e.budgetUsed(); b == 0 {
					e.t.Errorf("nothing predicted after 6 files in order")
				}
				return read + e.cat(3, "s3/bkt/d/f300")
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if b, d := e.budgetUsed(); b != 0 || d != 0 {
					t.Errorf("after the jump the budget holds %d bytes in %d dirs, want none", b, d)
				}
			},
		},
		{
			name: "two processes, two streams",
			on:   true,
			run: func(e *faEnv) int64 {
				var read int64
				for i := range 40 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
					read += e.cat(4, fmt.Sprintf("s3/bkt/d/f%03d", 200+i))
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if st.HitBytes+st.PendingBytes == 0 {
					t.Errorf("interleaved processes predicted nothing: %+v", st)
				}
			},
		},
		{
			name: "objects deleted after the listing",
			on:   true,
			run: func(e *faEnv) int64 {
				for i := 3; i < 30; i++ {
					if err := e.st.Store.Delete(context.Background(), fmt.Sprintf("d/f%03d", i), objstore.DeleteOptions{}); err != nil {
						e.t.Fatal(err)
					}
				}
				var read int64
				for i := range 3 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
				}
				return read + e.cat(3, "s3/bkt/d/f030")
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {},
		},
		{
			name: "writes into the directory meanwhile",
			on:   true,
			run: func(e *faEnv) int64 {
				var read int64
				for i := range 30 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
					h, err := e.fs.Create(context.Background(), fmt.Sprintf("s3/bkt/d/f%03d.out", i), 0o644, OpenFlags{Write: true})
					if err != nil {
						e.t.Fatal(err)
					}
					if _, err := h.Write([]byte("out"), 0); err != nil {
						e.t.Fatal(err)
					}
					if err := h.Release(); err != nil {
						e.t.Fatal(err)
					}
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if st.PredictedBytes == 0 {
					t.Errorf("nothing predicted while writing beside: %+v", st)
				}
			},
		},
		{
			name: "budget per directory",
			on:   true,
			run: func(e *faEnv) int64 {
				var read int64
				for i := range 8 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/big/g%02d", i))
					if b, _ := e.budgetUsed(); b > e.fs.fahead.budget || b > faDirBudget {
						e.t.Errorf("after %d files %d bytes predicted ahead, budget %d", i+1, b, e.fs.fahead.budget)
					}
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {},
		},
		{
			name: "a directory of more names than faMaxEntries",
			on:   true,
			run: func(e *faEnv) int64 {
				defer func(n int) { faMaxEntries = n }(faMaxEntries)
				faMaxEntries = 499
				var read int64
				for i := range 20 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if st.Files != 0 {
					t.Errorf("%d files predicted in a directory over the limit", st.Files)
				}
			},
		},
		{
			name: "off",
			on:   false,
			run: func(e *faEnv) int64 {
				var read int64
				for i := range 20 {
					read += e.cat(3, fmt.Sprintf("s3/bkt/d/f%03d", i))
				}
				return read
			},
			check: func(t *testing.T, e *faEnv, read int64, st block.PredictStats) {
				if st.Files != 0 {
					t.Errorf("off, yet %d files predicted", st.Files)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A 256 MiB cache: a 32 MiB mount budget.
			e := newFAEnv(t, tt.on, 256<<20)
			for i := range 500 {
				e.put(fmt.Sprintf("d/f%03d", i), 1500)
			}
			for i := range 8 {
				e.put(fmt.Sprintf("big/g%02d", i), 6<<20)
			}
			e.readdir("s3/bkt/d")
			e.readdir("s3/bkt/big")
			read := tt.run(e)
			st := e.bc.PredictStats()
			tt.check(t, e, read, st)
			e.fs.Close()
			if fin := e.bc.SettlePredictions(); fin.PendingBytes != 0 || fin.HitBytes+fin.WastedBytes > fin.PredictedBytes {
				t.Errorf("settled: %+v", fin)
			}
		})
	}
}
