package supervise

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// orderStore records, in order, the keys objects appear at (Put, Copy).
type orderStore struct {
	objstore.Store
	mu   sync.Mutex // guards keys
	keys []string
}

func (s *orderStore) add(key string) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
}

func (s *orderStore) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

func (s *orderStore) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, src, size, opts)
	if err == nil {
		s.add(key)
	}
	return info, err
}

func (s *orderStore) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	info, err := s.Store.Copy(ctx, src, dst, opts)
	if err == nil {
		s.add(dst)
	}
	return info, err
}

// TestNextflowExitcodeLast: .exitcode, written by the wrapper before the
// task ends, appears in the bucket after every other output of its work
// dir: files in subdirectories, and the server-side copies of symlink
// compaction, which runs after the task and before the drain.
func TestNextflowExitcodeLast(t *testing.T) {
	e := newNFEnv(t, map[string]string{nextflow.VarWork: nfWork})
	e.ord = &orderStore{Store: e.st}
	ctx := context.Background()
	e.put("work/ab/cdef/.command.run", nfCommandRun)
	e.put("inputs/sample.txt", "SAMPLE")
	e.put("inputs/ref.txt", "REF")
	e.put("inputs/dir/x", "X")
	e.put("inputs/dir/y/z", "Z")
	e.task()
	w := "s3/bkt/work/ab/cdef"
	h, err := e.fs.Create(ctx, w+"/sub/deep/data.bin", 0o644, vfs.OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("deep"), 0)
	h.Release()
	// Let the uploads of the task's files run: .exitcode must wait anyway.
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(e.ord.seen(), "work/ab/cdef/sub/deep/data.bin") || !slices.Contains(e.ord.seen(), "work/ab/cdef/real.txt") {
		if time.Now().After(deadline) {
			t.Fatalf("the task's files were not uploaded: %v", e.ord.seen())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	if err := e.hooks.BeforeDrain(ctx, "/fusion"); err != nil {
		t.Fatalf("BeforeDrain: %v\n%s", err, e.logs)
	}
	e.wb.Stop()
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	keys := e.ord.seen()
	last := lastIndex(keys, "work/ab/cdef/.exitcode")
	if last < 0 {
		t.Fatalf(".exitcode never uploaded: %v", keys)
	}
	for _, k := range []string{"out.txt", "results/x", "results/y/z", "sub/a.csv", "real.txt", "sub/deep/data.bin"} {
		if !slices.Contains(keys, "work/ab/cdef/"+k) {
			t.Errorf("%s never appeared: %s", k, strings.Join(keys, ", "))
		}
	}
	for i, k := range keys {
		if i > last && strings.HasPrefix(k, "work/ab/cdef/") {
			t.Errorf("%s appeared after .exitcode: %s", k, strings.Join(keys, ", "))
		}
	}
}

// lastIndex returns the index of the last s in keys, or -1.
func lastIndex(keys []string, s string) int {
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i] == s {
			return i
		}
	}
	return -1
}
