package vfs

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// s3Bucket resolves s3://bkt to st and every other bucket to
// objstore.ErrNoBucket.
func s3Bucket(st objstore.Store) func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
	return func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
}

// newTestFS builds an FS over resolve with a writeback manager (fast
// retries), a meta cache of maxEntries and a block cache of blockBytes,
// all closed at the test's end. Cleanups registered after it run first.
func newTestFS(t *testing.T, resolve func(ctx context.Context, scheme, bucket string) (objstore.Store, error), maxEntries, blockBytes int64) (*FS, *writeback.Manager) {
	t.Helper()
	fs, wb, _ := newTestFSOpts(t, resolve, maxEntries, blockBytes, Options{})
	return fs, wb
}

// newTestFSOpts is newTestFS with Options, also returning the block cache.
func newTestFSOpts(t *testing.T, resolve func(ctx context.Context, scheme, bucket string) (objstore.Store, error), maxEntries, blockBytes int64, opts Options) (*FS, *writeback.Manager, *block.Cache) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	wb, err := writeback.New(context.Background(), writeback.Config{
		Dir: filepath.Join(t.TempDir(), "wb"), MinFreeBytes: -1, Logger: log,
		RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond,
	}, resolve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	mc, err := meta.New(meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Minute, MaxEntries: maxEntries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Close)
	bc, err := block.New(block.Config{Dir: filepath.Join(t.TempDir(), "blocks"), MaxBytes: blockBytes, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	fs := New(opts, Deps{Resolve: resolve, Writeback: wb, Blocks: bc, Meta: mc, Logger: log})
	t.Cleanup(fs.Close) // before the caches close: it waits for background listings
	return fs, wb, bc
}
