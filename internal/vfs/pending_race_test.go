package vfs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// TestRenamedDirGoneWhileListed: after `mv a c`, the old name a/x of a
// rewritten file stays in the bucket until c/x is durable, hidden. A
// lookup of a that lists a/ just before that delete must still answer
// ENOENT, and keep answering it: the listing saw a/x, but a/x was only an
// old name (soak model divergences: a directory where the model had none).
// Readdir of the parent, racing the same way, must not show a.
func TestRenamedDirGoneWhileListed(t *testing.T) {
	for _, op := range []string{"lookup", "readdir"} {
		t.Run(op, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			g := newGate("a/x") // hold the upload to a/x: it is in flight at the rename
			e := newRaceEnv(t, g)
			data := bytes.Repeat([]byte("x"), 1000)
			if _, err := e.mem.Put(ctx, "a/x", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			h, err := e.fs.Open(ctx, "s3/bkt/a/x", OpenFlags{Write: true})
			if err != nil {
				t.Fatal(err)
			}
			writeRelease(t, h, []byte("!"), int64(len(data)))
			g.waitCaught(ctx, t)
			if err := e.fs.Rename(ctx, "s3/bkt/a", "s3/bkt/c", RenameFlags{}); err != nil {
				t.Fatal(err)
			}
			old := writeback.Target{Scheme: "s3", Bucket: "bkt", Key: "a/x"}
			if !e.wb.PendingDelete(old) {
				t.Fatal("a/x is not pending deletion after the rename")
			}
			// Once the listing answered, let c/x land and a/x go.
			after := func(opts objstore.ListOptions) {
				if opts.Prefix == "a/" || opts.Prefix == "" {
					g.release()
					for e.wb.PendingDelete(old) && ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
				}
			}
			e.hook.after.Store(&after)
			if op == "lookup" {
				for i := range 2 {
					if a, err := e.fs.Getattr(ctx, "s3/bkt/a"); !errors.Is(err, syscall.ENOENT) {
						t.Fatalf("stat a (%d): %+v, %v; want ENOENT", i, a, err)
					}
				}
			} else {
				ents, err := e.fs.Readdir(ctx, "s3/bkt")
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, en := range ents {
					names = append(names, en.Name)
				}
				if got := strings.Join(names, " "); got != "c" {
					t.Errorf("readdir of the bucket = %q, want \"c\"", got)
				}
			}
			e.hook.after.Store(nil)
			if _, err := e.mem.Stat(ctx, "a/x"); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("a/x still in the bucket: %v", err)
			}
		})
	}
}
