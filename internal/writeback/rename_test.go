package writeback

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// vfsRename renames a dirty file the way the vfs does: writeback re-keys
// it, and the caller deletes the old key unless the file still depends on
// it.
func vfsRename(t *testing.T, e *env, m *Manager, from, to string) {
	t.Helper()
	f := m.Get(tgt(from))
	if f == nil {
		t.Fatalf("no dirty file at %s", from)
	}
	if err := m.Rename(tgt(from), tgt(to)); err != nil {
		t.Fatalf("Rename %s → %s: %v", from, to, err)
	}
	if !f.HasBase(from) {
		if err := e.mem.Delete(context.Background(), from, objstore.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func count(events []string, ev string) int {
	n := 0
	for _, e := range events {
		if e == ev {
			n++
		}
	}
	return n
}

func TestRenamePendingUploadsOnce(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	data := pattern(3000, 1)
	f, _ := m.Create(tgt("a"), 0o644)
	f.Acquire()
	f.WriteAt(data, 0)
	vfsRename(t, e, m, "a", "b")
	if m.Get(tgt("a")) != nil || m.Get(tgt("b")) != f {
		t.Fatal("Get does not follow the rename")
	}
	f.Release()
	drain(t, m)
	e.wantObject("b", data)
	e.wantNoObject("a")
	if ev := e.rec.events(); !slices.Equal(ev, []string{"put b"}) {
		t.Fatalf("events %v, want one put of b", ev)
	}
}

// TestRenameInFlight: an upload running under the old name is cancelled;
// the file is uploaded once under the new one.
func TestRenameInFlight(t *testing.T) {
	for _, landing := range []bool{false, true} {
		name := "cancelled"
		if landing {
			name = "old upload lands anyway"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.landing = landing
			g := e.gate(opKey(faulty.OpPut, "a"))
			e.setFaults(faulty.Config{Stall: g.stall})
			m := e.manager()
			data := pattern(2000, 2)
			writeFile(t, m, "a", data)
			waitFor(t, "the upload of a", func() bool { return g.held.Load() == 1 })
			vfsRename(t, e, m, "a", "b")
			g.release()
			drain(t, m)
			e.wantObject("b", data)
			waitFor(t, "the stray a to go", func() bool { _, ok := e.object("a"); return !ok })
			if n := count(e.rec.events(), "put b"); n != 1 {
				t.Errorf("%d puts of b, want 1", n)
			}
			assertStagingEmpty(t, m)
		})
	}
}

// TestRenameWithBase: the old key of a file that reads from it is deleted
// only once the file is durable under its new name.
func TestRenameWithBase(t *testing.T) {
	e := newEnv(t)
	g := e.gate(func(op, key string) bool { return key == "new" && (op == faulty.OpComplete || op == faulty.OpPut) })
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	orig := pattern(6*testPart, 3)
	e.putObject("old", orig)
	f := openBase(t, e, m, "old")
	f.WriteAt([]byte("tail"), int64(len(orig)))
	vfsRename(t, e, m, "old", "new")
	if !f.HasBase("old") {
		t.Fatal("HasBase(old) = false after the rename")
	}
	if !m.PendingDelete(tgt("old")) || !slices.Equal(m.PendingDeletes("s3", "bkt", ""), []string{"old"}) {
		t.Error("old is not reported as pending delete")
	}
	f.Release()
	waitFor(t, "the upload of new", func() bool { return g.held.Load() == 1 })
	e.wantObject("old", orig) // still there: new is not durable yet
	g.release()
	drain(t, m)
	e.wantObject("new", append(orig, "tail"...))
	e.wantNoObject("old")
	ev := e.rec.events()
	if i, j := slices.Index(ev, "complete new"), slices.Index(ev, "delete old"); i < 0 || j < i {
		t.Fatalf("events %v: old must be deleted after new completes", ev)
	}
	if m.PendingDelete(tgt("old")) {
		t.Error("old still pending delete after the drain")
	}
}

// TestRenameUnchangedBase: renaming a file opened but not written copies
// it on the server.
func TestRenameUnchangedBase(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(100, 4)
	e.putObject("x", orig)
	f := openBase(t, e, m, "x")
	vfsRename(t, e, m, "x", "y")
	f.Release()
	drain(t, m)
	e.wantObject("y", orig)
	e.wantNoObject("x")
	if e.fs.Calls(faulty.OpPut) != 0 || e.fs.Calls(faulty.OpCopy) != 1 {
		t.Errorf("Put %d Copy %d, want a server-side copy", e.fs.Calls(faulty.OpPut), e.fs.Calls(faulty.OpCopy))
	}
}

func TestRenameChain(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(5*testPart, 5)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("1"), 0)
	vfsRename(t, e, m, "a", "b")
	vfsRename(t, e, m, "b", "c")
	if !f.HasBase("a") || f.HasBase("b") {
		t.Errorf("HasBase a %v b %v", f.HasBase("a"), f.HasBase("b"))
	}
	f.Release()
	drain(t, m)
	want := append([]byte("1"), orig[1:]...)
	e.wantObject("c", want)
	e.wantNoObject("a")
	e.wantNoObject("b")
}

// TestRenameBackOntoBase: a → b → a keeps the object a (it is the new
// upload's target, never deleted).
func TestRenameBackOntoBase(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(5*testPart, 6)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("2"), 1)
	vfsRename(t, e, m, "a", "b")
	vfsRename(t, e, m, "b", "a")
	f.Release()
	drain(t, m)
	want := append([]byte{orig[0], '2'}, orig[2:]...)
	e.wantObject("a", want)
	e.wantNoObject("b")
}

// TestRenameOntoDirty: the file renamed over replaces the target's dirty
// file, whose content never lands.
func TestRenameOntoDirty(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	fa, _ := m.Create(tgt("a"), 0o644)
	fa.Acquire()
	fa.WriteAt([]byte("content of a"), 0)
	writeFileOpen := func() *File {
		fb, _ := m.Create(tgt("b"), 0o644)
		fb.Acquire()
		fb.WriteAt([]byte("content of b"), 0)
		return fb
	}
	fb := writeFileOpen()
	vfsRename(t, e, m, "a", "b")
	fa.Release()
	fb.Release()
	drain(t, m)
	e.wantObject("b", []byte("content of a"))
	e.wantNoObject("a")
	if n := count(e.rec.events(), "put b"); n != 1 {
		t.Errorf("%d puts of b, want 1", n)
	}
}

// TestCreateAtRenamedBase: a new file at the old name cancels its delete.
func TestCreateAtRenamedBase(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(5*testPart, 7)
	e.putObject("a", orig)
	f := openBase(t, e, m, "a")
	f.WriteAt([]byte("3"), 0)
	vfsRename(t, e, m, "a", "b")
	writeFile(t, m, "a", []byte("new a"))
	if f.HasBase("a") && m.PendingDelete(tgt("a")) {
		t.Error("a is still pending delete after a new file took the name")
	}
	f.Release()
	drain(t, m)
	e.wantObject("a", []byte("new a"))
	e.wantObject("b", append([]byte("3"), orig[1:]...))
}

func TestRenameErrors(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	writeFile(t, m, "a", []byte("x"))
	tests := []struct {
		name     string
		from, to Target
		want     error
	}{
		{"other bucket", tgt("a"), Target{Scheme: "s3", Bucket: "other", Key: "a"}, syscall.EXDEV},
		{"other scheme", tgt("a"), Target{Scheme: "gs", Bucket: "bkt", Key: "a"}, syscall.EXDEV},
		{"no dirty file", tgt("zz"), tgt("b"), syscall.ENOENT},
		{"bucket root", tgt("a"), tgt(""), syscall.EXDEV},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := m.Rename(tc.from, tc.to); !errors.Is(err, tc.want) {
				t.Fatalf("Rename = %v, want %v", err, tc.want)
			}
		})
	}
	if err := m.Rename(tgt("a"), tgt("a")); err != nil {
		t.Fatalf("Rename onto itself = %v", err)
	}
}

// TestRenameSymlink re-keys a pending symlink.
func TestRenameSymlink(t *testing.T) {
	e := newEnv(t)
	g := e.gate(opKey(faulty.OpPut, "l"))
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	if err := m.Symlink(tgt("l"), "target"); err != nil {
		t.Fatal(err)
	}
	vfsRename(t, e, m, "l", "l2")
	g.release()
	drain(t, m)
	info, err := e.mem.Stat(context.Background(), "l2")
	if err != nil || info.Metadata[MetaSymlink] != "target" {
		t.Fatalf("l2: %+v, %v", info, err)
	}
	e.wantNoObject("l")
}

// TestRenameJustDurable: a Rename racing with the file becoming durable
// (the vfs saw it dirty; by the call it was dropped) still renames it.
func TestRenameJustDurable(t *testing.T) {
	for _, symlink := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "symlink"}[symlink], func(t *testing.T) {
			e := newEnv(t)
			// Hold every call on b so the renamed file cannot become
			// durable (and be dropped) before the test looks at it.
			g := e.gate(func(_, key string) bool { return key == "b" })
			e.setFaults(faulty.Config{Stall: g.stall})
			m := e.manager()
			if symlink {
				if err := m.Symlink(tgt("a"), "x"); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFile(t, m, "a", []byte("durable"))
			}
			drain(t, m)
			waitFor(t, "the drop", func() bool { return m.Get(tgt("a")) == nil })
			if err := m.Rename(tgt("a"), tgt("b")); err != nil {
				t.Fatalf("Rename of a file dropped a moment ago: %v", err)
			}
			f := m.Get(tgt("b"))
			if f == nil {
				t.Fatal("no file at b after the rename")
			}
			if !f.HasBase("a") && !symlink {
				t.Error("HasBase(a) = false: the vfs would delete a before b is durable")
			}
			if !f.HasBase("a") {
				e.mem.Delete(context.Background(), "a", objstore.DeleteOptions{})
			}
			g.release()
			drain(t, m)
			e.wantNoObject("a")
			info, err := e.mem.Stat(context.Background(), "b")
			if err != nil {
				t.Fatal(err)
			}
			if symlink && info.Metadata[MetaSymlink] != "x" {
				t.Errorf("b: metadata %v", info.Metadata)
			}
			if !symlink {
				e.wantObject("b", []byte("durable"))
			}
		})
	}
}
