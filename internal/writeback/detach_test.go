package writeback

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestDetach: before the vfs overwrites the old name of a renamed file
// that reads from it, Detach copies the clean bytes into the file's
// staging and drops the pending delete: both names end up right.
func TestDetach(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(5*testPart, 1)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("new"), 0)
	vfsRename(t, e, m, "a", "b")
	if !m.PendingDelete(tgt("a")) {
		t.Fatal("a not pending delete after the rename")
	}
	if err := m.Detach(context.Background(), tgt("a")); err != nil {
		t.Fatal(err)
	}
	if m.PendingDelete(tgt("a")) || f.HasBase("a") {
		t.Fatalf("after Detach: PendingDelete %v HasBase %v", m.PendingDelete(tgt("a")), f.HasBase("a"))
	}
	e.putObject("a", []byte("the vfs copied something else here"))
	f.Release()
	drain(t, m)
	e.wantObject("b", append([]byte("new"), orig[3:]...))
	e.wantObject("a", []byte("the vfs copied something else here"))
}

// TestOpenBaseOfDeletedVersion: an object version writeback deleted (the
// old name of a renamed file), seen by the caller just before, opens as
// missing.
func TestOpenBaseOfDeletedVersion(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	e.putObject("a", pattern(100, 2))
	f := openBase(t, e, m, "a")
	stale, _ := e.mem.Stat(context.Background(), "a")
	f.WriteAt([]byte("x"), 0)
	vfsRename(t, e, m, "a", "b")
	f.Release()
	drain(t, m)
	e.wantNoObject("a")
	if _, err := m.OpenBase(context.Background(), tgt("a"), stale); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("OpenBase of a deleted version = %v, want ENOENT", err)
	}
}

// TestPendingDeleteOfStray: while an upload to the old name of a renamed
// file may still land, that name is reported as pending delete; after it
// is gone, it is not.
func TestPendingDeleteOfStray(t *testing.T) {
	e := newEnv(t)
	e.landing = true
	g := e.gate(opKey(faulty.OpPut, "a"))
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	writeFile(t, m, "a", []byte("data"))
	waitFor(t, "the upload of a", func() bool { return g.held.Load() == 1 })
	vfsRename(t, e, m, "a", "b")
	if !m.PendingDelete(tgt("a")) {
		t.Error("a, where an upload may still land, is not pending delete")
	}
	if got := m.PendingDeletes("s3", "bkt", ""); len(got) != 1 || got[0] != "a" {
		t.Errorf("PendingDeletes = %v", got)
	}
	g.release()
	drain(t, m)
	waitFor(t, "the stray to go", func() bool { return !m.PendingDelete(tgt("a")) })
	e.wantNoObject("a")
	e.wantObject("b", []byte("data"))
}

// TestReadWhileOwnUploadLands: reads of clean ranges stay right while the
// file's own upload replaces (and then deletes) its base.
func TestReadWhileOwnUploadLands(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(6*testPart, 3)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("zz"), 0)
	vfsRename(t, e, m, "a", "b")
	f.Release()
	want := append([]byte("zz"), orig[2:]...)
	buf := make([]byte, len(want))
	for range 200 {
		n, err := f.ReadAt(context.Background(), buf, 0)
		if n != len(want) || (err != nil && err.Error() != "EOF") || !bytes.Equal(buf, want) {
			t.Fatalf("read during the upload: %d, %v", n, err)
		}
		if f.Durable() {
			break
		}
	}
	drain(t, m)
}

// TestDetachWaitsForDeleteInFlight: Detach of a key whose delete (the old
// name of a renamed file, now durable) is already on the wire returns only
// once that delete ended: the caller's write of the key that follows is
// never deleted by it.
func TestDetachWaitsForDeleteInFlight(t *testing.T) {
	e := newEnv(t)
	g := e.gate(opKey(faulty.OpDelete, "a"))
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	orig := pattern(100, 1)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("new"), 0)
	vfsRename(t, e, m, "a", "b")
	f.Release()
	waitFor(t, "the delete of a to be held", func() bool { return g.held.Load() == 1 })
	done := make(chan error, 1)
	go func() { done <- m.Detach(context.Background(), tgt("a")) }() // owner: this test, which reads done
	select {
	case err := <-done:
		t.Fatalf("Detach returned (%v) while the delete of a was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.putObject("a", []byte("written by the vfs"))
	drain(t, m)
	e.wantObject("a", []byte("written by the vfs"))
	e.wantObject("b", append([]byte("new"), orig[3:]...))
}

// TestRemovedFileKeepsBytesForHandles: a file removed while a handle holds
// it and its upload runs keeps its staged bytes for that handle when the
// cancelled attempt ends between the unlink and the discard (the data
// file is unlinked, never recycled as a spare: a spare is truncated).
func TestRemovedFileKeepsBytesForHandles(t *testing.T) {
	e := newEnv(t)
	g := e.gate(opKey(faulty.OpPut, "a"))
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	data := pattern(testPart/2, 7)
	f := writeFile(t, m, "a", data)
	waitFor(t, "the upload", func() bool { return g.held.Load() == 1 })
	f.Acquire() // an open descriptor
	m.mu.Lock()
	m.unlinkLocked(f) // Remove, before its discard
	m.mu.Unlock()
	g.release()
	waitFor(t, "the attempt's end", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return !f.live
	})
	f.discard()
	buf := make([]byte, len(data))
	if n, err := f.ReadAt(context.Background(), buf, 0); n != len(data) || !bytes.Equal(buf, data) {
		t.Errorf("read after the unlink: %d, %v; first difference at %d", n, err, firstDiff(buf, data))
	}
	if err := f.Release(); err != nil {
		t.Error(err)
	}
	drain(t, m)
	e.wantNoObject("a")
}
