package vfs

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// outageEnv is an FS over one mem bucket (s3/bkt) behind a switch that
// makes every request fail like an unreachable endpoint.
type outageEnv struct {
	t    *testing.T
	fs   *FS
	wb   *writeback.Manager
	mem  *mem.Store
	down atomic.Bool
	// stall names keys (separated by spaces) whose uploads hang until
	// cancelled.
	stall atomic.Value
}

func newOutageEnv(t *testing.T) *outageEnv {
	t.Helper()
	e := &outageEnv{t: t, mem: mem.New(mem.Options{Bucket: "bkt"})}
	e.stall.Store("")
	st := faulty.New(e.mem, faulty.Config{Fail: func(op, key string) error {
		if e.down.Load() {
			return faulty.ErrTransport
		}
		return nil
	}, Stall: func(op, key string) time.Duration {
		if (op == faulty.OpPut || op == faulty.OpCreateUpload) && slices.Contains(strings.Fields(e.stall.Load().(string)), key) {
			return faulty.Forever
		}
		return 0
	}})
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	e.fs, e.wb = newTestFS(t, resolve, 10000, 256<<20)
	return e
}

func (e *outageEnv) put(key string, body []byte) {
	e.t.Helper()
	if _, err := e.mem.Put(context.Background(), key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// write creates p with body through the FS and closes it (staged).
func (e *outageEnv) write(p string, body []byte) {
	e.t.Helper()
	h, err := e.fs.Create(context.Background(), p, 0o644, OpenFlags{Write: true})
	if err != nil {
		e.t.Fatalf("create %s: %v", p, err)
	}
	if _, err := h.Write(body, 0); err != nil {
		e.t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		e.t.Fatal(err)
	}
}

func readAt(t *testing.T, h *Handle, off int64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	got, err := h.Read(context.Background(), buf, off)
	if err != nil {
		t.Fatalf("read at %d: %v", off, err)
	}
	return buf[:got]
}

// TestOpenHandleSurvivesUnlink: a descriptor keeps reading (and writing)
// its file after the name is unlinked, whether it reads a clean object,
// a staged file, or a staged file over an object (its base).
func TestOpenHandleSurvivesUnlink(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(e *outageEnv, p string)
		flags OpenFlags
	}{
		{name: "clean", setup: func(e *outageEnv, p string) { e.put(p[len("s3/bkt/"):], data) }},
		{name: "clean-rdwr", setup: func(e *outageEnv, p string) { e.put(p[len("s3/bkt/"):], data) }, flags: OpenFlags{Write: true}},
		{name: "staged", setup: func(e *outageEnv, p string) { e.write(p, data) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newOutageEnv(t)
			p := "s3/bkt/d/f"
			tc.setup(e, p)
			h, err := e.fs.Open(ctx, p, tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release()
			if err := e.fs.Unlink(ctx, p); err != nil {
				t.Fatalf("unlink: %v", err)
			}
			if _, err := e.fs.Getattr(ctx, p); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("stat after unlink: %v, want ENOENT", err)
			}
			if _, err := e.mem.Stat(ctx, "d/f"); !errors.Is(err, objstore.ErrNotFound) && tc.name != "staged" {
				t.Errorf("the object is still in the bucket: %v", err)
			}
			if got := readAt(t, h, 700<<10, 100); !bytes.Equal(got, data[700<<10:700<<10+100]) {
				t.Errorf("read after unlink: %q", got)
			}
			a, err := h.Attr(ctx)
			if err != nil || a.Size != int64(len(data)) {
				t.Errorf("fstat after unlink: %+v, %v", a, err)
			}
		})
	}
}

// TestOpenHandleFollowsRename: a descriptor on a clean object keeps
// reading it after a rename (the object is copied and the old key
// deleted).
func TestOpenHandleFollowsRename(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("ferry-"), 200<<10)
	e.put("a", data)
	h, err := e.fs.Open(ctx, "s3/bkt/a", OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := e.fs.Rename(ctx, "s3/bkt/a", "s3/bkt/b", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, h, 1<<20, 60); !bytes.Equal(got, data[1<<20:1<<20+60]) {
		t.Errorf("read after rename: %q", got)
	}
	if l, linked := h.where(); !linked || l.Key != "b" {
		t.Errorf("handle is at %v (linked %v), want b", l, linked)
	}
}

// TestOutageStagedNames: while the store is unreachable, staged files,
// the directories holding them and the bucket still stat, and a staged
// file can be renamed (its upload happens under the new name later).
func TestOutageStagedNames(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	if _, err := e.fs.Getattr(ctx, "s3/bkt"); err != nil {
		t.Fatal(err)
	}
	e.down.Store(true)
	e.write("s3/bkt/out/sub/f.tmp", []byte("staged"))
	e.fs.deps.Meta.Clear() // the kernel's and ferry's caches expired
	e.fs.mu.Lock()
	for k, b := range e.fs.buckets {
		b.expires = time.Now().Add(-time.Second)
		e.fs.buckets[k] = b
	}
	e.fs.mu.Unlock()
	for _, p := range []string{"s3/bkt", "s3/bkt/out", "s3/bkt/out/sub", "s3/bkt/out/sub/f.tmp"} {
		if _, err := e.fs.Getattr(ctx, p); err != nil {
			t.Errorf("stat %s during the outage: %v", p, err)
		}
	}
	if err := e.fs.Rename(ctx, "s3/bkt/out/sub/f.tmp", "s3/bkt/out/sub/f", RenameFlags{}); err != nil {
		t.Fatalf("rename of a staged file during the outage: %v", err)
	}
	if a, err := e.fs.Getattr(ctx, "s3/bkt/out/sub/f"); err != nil || a.Size != 6 {
		t.Errorf("stat of the new name: %+v, %v", a, err)
	}
	e.down.Store(false)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.wb.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Stat(ctx, "out/sub/f"); err != nil {
		t.Errorf("new name not durable: %v", err)
	}
	if _, err := e.mem.Stat(ctx, "out/sub/f.tmp"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("old name in the bucket: %v", err)
	}
}

// TestFsyncDir: fsync of a directory makes the files staged directly in
// it durable, and succeeds on directories without any.
func TestFsyncDir(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	e.write("s3/bkt/d/a", []byte("a"))
	if err := e.fs.Rename(ctx, "s3/bkt/d/a", "s3/bkt/d/b", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "s3", "s3/bkt", "s3/bkt/d"} {
		if err := e.fs.Fsync(ctx, p); err != nil {
			t.Errorf("fsync %q: %v", p, err)
		}
	}
	if _, err := e.mem.Stat(ctx, "d/b"); err != nil {
		t.Errorf("d/b not durable after fsync of d: %v", err)
	}
}

// TestRenameDirLeavesOldNames: the old name of a renamed file, still in
// the bucket until its new name is durable, is not part of its former
// directory: renaming that directory does not carry it along.
func TestRenameDirLeavesOldNames(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	e.write("s3/bkt/b/a", []byte("first"))
	e.write("s3/bkt/b/keep", []byte("keep"))
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// Changed over its object, then renamed: b/a is deleted only once x
	// is durable, and x's upload hangs.
	e.stall.Store("x")
	h, err := e.fs.Open(ctx, "s3/bkt/b/a", OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("second"), 0)
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Rename(ctx, "s3/bkt/b/a", "s3/bkt/x", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.fs.Rename(rctx, "s3/bkt/b", "s3/bkt/d", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	ents, err := e.fs.Readdir(ctx, "s3/bkt/d")
	if err != nil || len(ents) != 1 || ents[0].Name != "keep" {
		t.Errorf("the renamed directory lists %v (%v), want only keep", ents, err)
	}
	if _, err := e.mem.Stat(ctx, "d/a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the old name was copied along: %v", err)
	}
	for _, p := range []string{"s3/bkt/b", "s3/bkt/b/a"} {
		if _, err := e.fs.Getattr(ctx, p); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
		}
	}
}

// TestReaderFollowsWriter: a descriptor opened read-only on a clean
// object sees what another descriptor writes to the same file, also once
// that file is durable and its writer closed.
func TestReaderFollowsWriter(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	r, w := readerAndWriter(t, e, "new")
	defer r.Release()
	if got := readAt(t, r, 0, 10); string(got) != "new" {
		t.Errorf("read while the writer is open: %q", got)
	}
	if err := w.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, r, 0, 10); string(got) != "new" {
		t.Errorf("read after the writer closed and the file is durable: %q", got)
	}
}

// TestDirAtRenamedName: a directory made at the old name of a renamed
// file (whose object is deleted only once the new name is durable) shows.
func TestDirAtRenamedName(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	e.write("s3/bkt/b", []byte("first"))
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.stall.Store("c")
	h, err := e.fs.Open(ctx, "s3/bkt/b", OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("second"), 0)
	h.Release()
	if err := e.fs.Rename(ctx, "s3/bkt/b", "s3/bkt/c", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Getattr(ctx, "s3/bkt/b"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of the old name: %v, want ENOENT", err)
	}
	if err := e.fs.Mkdir(ctx, "s3/bkt/b"); err != nil {
		t.Fatal(err)
	}
	e.fs.deps.Meta.Clear()
	if a, err := e.fs.Getattr(ctx, "s3/bkt/b"); err != nil || a.Kind != KindDir {
		t.Errorf("stat of the new directory: %+v, %v", a, err)
	}
	if err := e.fs.Rmdir(ctx, "s3/bkt/b"); err != nil {
		t.Errorf("rmdir of the new directory: %v", err)
	}
}

// TestUnlinkRenamedOpenFile: a descriptor on a file that was renamed
// (its clean bytes still come from the object at the old name, deleted
// by writeback once the new name is durable) and then unlinked keeps
// reading those bytes; neither name stays in the bucket.
func TestUnlinkRenamedOpenFile(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("c"), 70000)
	e.write("s3/bkt/c", data)
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.stall.Store("a")
	h, err := e.fs.Open(ctx, "s3/bkt/c", OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	h.Write([]byte("w"), 100)
	if err := e.fs.Rename(ctx, "s3/bkt/c", "s3/bkt/a", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Unlink(ctx, "s3/bkt/a"); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{}, data...)
	want[100] = 'w'
	buf := make([]byte, 100000)
	n, err := h.Read(ctx, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Errorf("read after rename and unlink: %d bytes, %v", n, err)
	}
	for _, k := range []string{"a", "c"} {
		if _, err := e.mem.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s in the bucket: %v", k, err)
		}
	}
}

// TestOutageUnlinkStaged: a staged file that never reached the bucket can
// be unlinked while the store is unreachable.
func TestOutageUnlinkStaged(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	if _, err := e.fs.Getattr(ctx, "s3/bkt"); err != nil {
		t.Fatal(err)
	}
	e.down.Store(true)
	e.write("s3/bkt/tmp", []byte("scratch"))
	if err := e.fs.Unlink(ctx, "s3/bkt/tmp"); err != nil {
		t.Fatalf("unlink of a staged file during the outage: %v", err)
	}
	e.down.Store(false)
	if _, err := e.fs.Getattr(ctx, "s3/bkt/tmp"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat after unlink: %v", err)
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Stat(ctx, "tmp"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("tmp in the bucket: %v", err)
	}
}

// TestReaderFollowsTruncate: a read-only descriptor sees a truncate made
// through the path, also when it read nothing in between and the
// truncated file became durable; unlinking the name then works.
func TestReaderFollowsTruncate(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	e.put("d", bytes.Repeat([]byte("d"), 30000))
	r, err := e.fs.Open(ctx, "s3/bkt/d", OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	size := int64(19401)
	if _, err := e.fs.Setattr(ctx, "s3/bkt/d", nil, SetAttr{Size: &size}); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if a, err := r.Attr(ctx); err != nil || a.Size != size {
		t.Errorf("fstat after truncate: %+v, %v", a, err)
	}
	if err := e.fs.Unlink(ctx, "s3/bkt/d"); err != nil {
		t.Fatalf("unlink: %v", err)
	}
	buf := make([]byte, 30000)
	if n, err := r.Read(ctx, buf, 0); err != nil || int64(n) != size {
		t.Errorf("read after truncate and unlink: %d bytes, %v", n, err)
	}
}

// TestReaderFollowsWriterThenRename: a reader that followed a file written
// through another descriptor, durable and dropped since (its reads go to
// the uploaded object), keeps reading it after a rename deletes the old
// key (soak seed 1795609156396133170 read ESTALE there).
func TestReaderFollowsWriterThenRename(t *testing.T) {
	e := newOutageEnv(t)
	ctx := context.Background()
	r, w := readerAndWriter(t, e, "new bytes")
	defer r.Release()
	if err := w.Release(); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, r, 0, 20); string(got) != "new bytes" {
		t.Fatalf("read while staged: %q", got)
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Rename(ctx, "s3/bkt/a", "s3/bkt/c", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Stat(ctx, "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("old key after rename: %v", err)
	}
	if got := readAt(t, r, 0, 20); string(got) != "new bytes" {
		t.Errorf("read after rename: %q", got)
	}
	if a, err := r.Attr(ctx); err != nil || a.Size != 9 {
		t.Errorf("fstat after rename: %+v, %v", a, err)
	}
}

// readerAndWriter puts an object a, opens it for reading (r), then for
// writing with O_TRUNC (w), and writes body through w.
func readerAndWriter(t *testing.T, e *outageEnv, body string) (r, w *Handle) {
	t.Helper()
	ctx := context.Background()
	e.put("a", bytes.Repeat([]byte("o"), 50000))
	r, err := e.fs.Open(ctx, "s3/bkt/a", OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	w, err = e.fs.Open(ctx, "s3/bkt/a", OpenFlags{Write: true, Trunc: true})
	if err != nil {
		r.Release()
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(body), 0); err != nil {
		t.Fatal(err)
	}
	return r, w
}
