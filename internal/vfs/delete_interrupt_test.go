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

// TestDeleteInterrupted: an unlink or rmdir whose request is interrupted
// (its context cancelled, as FUSE does on a signal) while its DELETE is
// out, which the server carries out anyway, succeeds. It used to fail
// with EINTR, and the retry (EINTR is retried) with ENOENT for a name
// that had been there (soak model seed 1796579436646992233).
func TestDeleteInterrupted(t *testing.T) {
	tests := []struct {
		name string
		keys []string // in the bucket
		op   func(fs *FS, ctx context.Context) error
		gone string // key the op deletes
	}{
		{name: "unlink", keys: []string{"c/f"}, op: func(fs *FS, ctx context.Context) error { return fs.Unlink(ctx, "s3/bkt/c/f") }, gone: "c/f"},
		{name: "rmdir", keys: []string{"d/"}, op: func(fs *FS, ctx context.Context) error { return fs.Rmdir(ctx, "s3/bkt/d") }, gone: "d/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bg := context.Background()
			store := mem.New(mem.Options{Bucket: "bkt"})
			for _, k := range tt.keys {
				if _, err := store.Put(bg, k, bytes.NewReader([]byte(k)), int64(len(k)), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu     sync.Mutex
				cancel context.CancelFunc // set for the op's request
			)
			st := faulty.New(store, faulty.Config{Fail: func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if op == faulty.OpDelete && cancel != nil {
					store.Delete(bg, key, objstore.DeleteOptions{}) // the server got it
					cancel()                                        // and the client is interrupted
					cancel = nil
				}
				return nil
			}})
			fs, _ := newTestFS(t, s3Bucket(st), 10000, 256<<20)
			ctx, c := context.WithCancel(bg)
			defer c()
			mu.Lock()
			cancel = c
			mu.Unlock()
			if err := tt.op(fs, ctx); err != nil {
				t.Fatalf("%s interrupted while its DELETE was out: %v (errno %v), want success", tt.name, err, Errno(err))
			}
			if ctx.Err() == nil {
				t.Fatal("the request was not cancelled: the test did not interrupt it")
			}
			if _, err := store.Stat(bg, tt.gone); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("%s still in the bucket: %v", tt.gone, err)
			}
			if _, err := fs.Getattr(bg, "s3/bkt/"+tt.gone); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("stat after the %s: %v, want ENOENT", tt.name, err)
			}
		})
	}
}
