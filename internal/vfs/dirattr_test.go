package vfs

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// TestDirAttrsNotGuessed: the attributes of a directory whose marker
// cannot be read are never made up where that would widen access: a
// lookup interrupted while it waits for the marker fails, and so does one
// whose HEAD fails when the kernel enforces modes (ExactAttrs); without
// ExactAttrs a failed HEAD shows the defaults (the directory stays usable
// in an outage). e2e TestPermissionsAllowOther saw a 0700 directory
// listed by another user after a remount under load (its lookup was
// interrupted and answered 0755).
func TestDirAttrsNotGuessed(t *testing.T) {
	for _, tt := range []struct {
		name     string
		exact    bool
		cancel   bool // the lookup's context is done
		failHead bool
		wantErr  bool   // an error, never attributes
		wantMode uint32 // else these attributes (or, when interrupted, an error)
	}{
		{name: "ok", exact: true, wantMode: 0o700},
		{name: "interrupted", exact: true, cancel: true, wantMode: 0o700},
		{name: "interrupted-not-exact", cancel: true, wantMode: 0o700},
		{name: "head-fails-exact", exact: true, failHead: true, wantErr: true},
		{name: "head-fails", failHead: true, wantMode: 0o755},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := mem.New(mem.Options{Bucket: "bkt", NoListMetadata: true})
			var failHead, stallHead atomic.Bool
			st := faulty.New(m, faulty.Config{Fail: func(op, key string) error {
				if op == faulty.OpStat && key == "d/" && failHead.Load() {
					return faulty.ErrTransport
				}
				return nil
			}, Stall: func(op, key string) time.Duration {
				if op == faulty.OpStat && key == "d/" && stallHead.Load() {
					return 300 * time.Millisecond // the HEAD the listing started is in flight
				}
				return 0
			}})
			resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
				if scheme == "s3" && bucket == "bkt" {
					return st, nil
				}
				return nil, objstore.ErrNoBucket
			}
			fs, wb := newTestFS(t, resolve, 10000, 256<<20)
			bg := context.Background()
			if err := fs.MkdirMode(bg, "s3/bkt/d", 0o700); err != nil {
				t.Fatal(err)
			}
			if err := wb.Drain(bg); err != nil {
				t.Fatal(err)
			}
			fs2, _ := newTestFS(t, resolve, 10000, 256<<20)
			fs2.opts.ExactAttrs = tt.exact
			failHead.Store(tt.failHead)
			stallHead.Store(tt.cancel)
			if _, err := fs2.Readdir(bg, "s3/bkt"); err != nil { // d from a listing; its marker HEAD starts
				t.Fatal(err)
			}
			ctx := bg
			if tt.cancel {
				c, cancel := context.WithCancel(bg)
				cancel()
				ctx = c
			}
			a, err := fs2.Getattr(ctx, "s3/bkt/d")
			switch {
			case tt.wantErr && err == nil:
				t.Errorf("getattr = mode %o, want an error", a.Mode)
			case !tt.wantErr && err != nil && !tt.cancel:
				t.Errorf("getattr: %v", err)
			case !tt.wantErr && err == nil && a.Mode != tt.wantMode:
				t.Errorf("getattr = mode %o, want %o", a.Mode, tt.wantMode)
			}
			if tt.cancel && err != nil && Errno(err) != syscall.EINTR {
				t.Errorf("interrupted getattr: %v (errno %v), want EINTR", err, Errno(err))
			}
		})
	}
}
