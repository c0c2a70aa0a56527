package vfs

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// TestRenameDirInterrupted: a directory rename interrupted (its request
// cancelled, as FUSE does on a signal) once its first key has moved runs
// to the end. Cancelled half way, it left the directory half moved, and
// the retried rename (EINTR is retried) failed with ENOTEMPTY on the
// part already at the destination (a soak model run found it).
func TestRenameDirInterrupted(t *testing.T) {
	ctx := context.Background()
	store := mem.New(mem.Options{Bucket: "bkt"})
	for _, k := range []string{"c/", "c/one", "c/two", "c/sub/three"} {
		if _, err := store.Put(ctx, k, bytes.NewReader([]byte(k)), int64(len(k)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		cancel context.CancelFunc // cancels the rename's request at its first Copy
	)
	st := faulty.New(store, faulty.Config{Fail: func(op, key string) error {
		mu.Lock()
		defer mu.Unlock()
		if op == faulty.OpCopy && cancel != nil {
			cancel()
			cancel = nil
		}
		return nil
	}})
	fs, _ := newTestFS(t, s3Bucket(st), 10000, 256<<20)
	// A dirty file in the directory too: it moves first, by re-keying.
	h, err := fs.Create(ctx, "s3/bkt/c/dirty", 0o644, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write([]byte("dirty"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	rctx, c := context.WithCancel(ctx)
	defer c()
	mu.Lock()
	cancel = c
	mu.Unlock()
	if err := fs.Rename(rctx, "s3/bkt/c", "s3/bkt/b/d", RenameFlags{}); err != nil {
		t.Fatalf("rename cancelled after its first copy: %v", err)
	}
	if rctx.Err() == nil {
		t.Fatal("the rename's context was not cancelled: the test did not interrupt it")
	}
	ents, err := fs.Readdir(ctx, "s3/bkt/b/d")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if err != nil || len(names) != 4 {
		t.Errorf("the moved directory lists %v (%v), want dirty one sub two", names, err)
	}
	if _, err := fs.Getattr(ctx, "s3/bkt/c"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of the old name: %v, want ENOENT", err)
	}
	for _, k := range []string{"c/one", "c/two", "c/sub/three"} {
		if _, err := store.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s left behind: %v", k, err)
		}
	}
}
