package vfs

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// TestRenameDirOverPendingName: moving a directory makes a subdirectory
// at the old name of a renamed file (still in the bucket until the new
// name is durable): that object is deleted first. MinIO lists no keys
// below an object's name, and once they were gone again it listed the
// name as a directory (soak model seed 1795791186049219785, op 82180:
// `rename d a; rename b d; rename d/d b` left d/d in readdir d).
func TestRenameDirOverPendingName(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	e.put("d/", nil)
	e.put("d/d", []byte("old"))
	// d/d changed (and still open, so not uploaded) and its directory
	// renamed: the object d/d stays, pending deletion.
	h, err := e.fs.Open(ctx, "s3/bkt/d/d", OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := h.Write([]byte("n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Rename(ctx, "s3/bkt/d", "s3/bkt/a", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Stat(ctx, "d/d"); err != nil {
		t.Fatalf("the old name is not pending in the bucket (%v): the test sets up nothing", err)
	}
	e.put("b/", nil)
	e.put("b/d/", nil)
	e.put("b/d/x", []byte("x"))
	if err := e.fs.Rename(ctx, "s3/bkt/b", "s3/bkt/d", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Stat(ctx, "d/d"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("object d/d beside keys below d/d/: %v", err)
	}
	if _, err := e.mem.Stat(ctx, "d/d/x"); err != nil {
		t.Errorf("d/d/x: %v", err)
	}
	r, err := e.fs.Open(ctx, "s3/bkt/a/d", OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, r, 0, 10); string(got) != "nld" {
		t.Errorf("the renamed file reads %q, want nld", got)
	}
	r.Release()
	if err := e.fs.Rename(ctx, "s3/bkt/d/d", "s3/bkt/b", RenameFlags{NoReplace: true}); err != nil {
		t.Fatal(err)
	}
	ents, err := e.fs.Readdir(ctx, "s3/bkt/d")
	if err != nil || len(ents) != 0 {
		t.Errorf("readdir d: %v (%v), want nothing", ents, err)
	}
	if _, err := e.fs.Getattr(ctx, "s3/bkt/d/d"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat d/d: %v, want ENOENT", err)
	}
}
