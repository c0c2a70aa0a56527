package vfs

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

func (e *matEnv) read(p string) string {
	e.t.Helper()
	h, err := e.fs.Open(context.Background(), p, OpenFlags{})
	if err != nil {
		e.t.Fatalf("open %s: %v", p, err)
	}
	defer h.Release()
	buf := make([]byte, 1<<20)
	n, err := h.Read(context.Background(), buf, 0)
	if err != nil && err != io.EOF {
		e.t.Fatalf("read %s: %v", p, err)
	}
	return string(buf[:n])
}

func (e *matEnv) names(p string) string {
	e.t.Helper()
	ents, err := e.fs.Readdir(context.Background(), p)
	if err != nil {
		e.t.Fatalf("readdir %s: %v", p, err)
	}
	var out []string
	for _, d := range ents {
		n := d.Name
		if d.Kind == KindDir {
			n += "/"
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (e *matEnv) drain() {
	e.t.Helper()
	if err := e.wb.Drain(context.Background()); err != nil {
		e.t.Fatalf("drain: %v", err)
	}
}

func TestNamespace(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	e.put("s3/bkt", "a", "file a")
	e.put("s3/bkt", "a/inner", "inner")
	e.put("s3/bkt", "d/x", "x")
	e.put("s3/bkt", "m/", "")
	e.put("s3/bkt", "odd//key", "odd")
	ctx := context.Background()
	tests := []struct {
		path string
		kind Kind
		err  error
	}{
		{path: "", kind: KindDir},
		{path: "s3", kind: KindDir},
		{path: "s3/bkt", kind: KindDir},
		{path: "s3/nobucket", err: syscall.ENOENT},
		{path: "xx", err: syscall.ENOENT},
		{path: "s3/bkt/a", kind: KindDir}, // a directory shadows the object a
		{path: "s3/bkt/a/inner", kind: KindFile},
		{path: "s3/bkt/d", kind: KindDir},
		{path: "s3/bkt/m", kind: KindDir},
		{path: "s3/bkt/nothing", err: syscall.ENOENT},
	}
	for _, tt := range tests {
		a, err := e.fs.Getattr(ctx, tt.path)
		if tt.err != nil {
			if Errno(err) != tt.err {
				t.Errorf("Getattr(%q) err = %v, want %v", tt.path, err, tt.err)
			}
			continue
		}
		if err != nil || a.Kind != tt.kind {
			t.Errorf("Getattr(%q) = %v, %v; want kind %v", tt.path, a, err, tt.kind)
		}
	}
	if got := e.names("s3/bkt"); got != "a/ d/ m/ odd/" {
		t.Errorf("readdir = %q", got)
	}
	if got := e.names("s3/bkt/odd"); got != "" {
		t.Errorf("readdir of a dir holding only an empty-component key = %q", got)
	}
	if got := e.read("s3/bkt/a/inner"); got != "inner" {
		t.Errorf("read = %q", got)
	}
}

func TestWriteRenameUnlink(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	ctx := context.Background()
	if err := e.fs.Mkdir(ctx, "s3/bkt/out"); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Mkdir(ctx, "s3/bkt/out"); Errno(err) != syscall.EEXIST {
		t.Fatalf("second mkdir: %v", err)
	}
	e.write("s3/bkt/out/a.txt", "hello")
	// Read-after-write before any upload.
	if got := e.read("s3/bkt/out/a.txt"); got != "hello" {
		t.Fatalf("read-after-write = %q", got)
	}
	if got := e.names("s3/bkt/out"); got != "a.txt" {
		t.Fatalf("listing before upload = %q", got)
	}
	if err := e.fs.Rename(ctx, "s3/bkt/out/a.txt", "s3/bkt/out/b.txt", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Symlink(ctx, "s3/bkt/out/l", "b.txt"); err != nil {
		t.Fatal(err)
	}
	e.drain()
	st := e.stores["s3/bkt"]
	if _, err := st.Stat(ctx, "out/a.txt"); err == nil {
		t.Error("out/a.txt exists after rename")
	}
	if got := e.read("s3/bkt/out/b.txt"); got != "hello" {
		t.Errorf("after upload read = %q", got)
	}
	if tgt, err := e.fs.Readlink(ctx, "s3/bkt/out/l"); err != nil || tgt != "b.txt" {
		t.Errorf("readlink = %q, %v", tgt, err)
	}
	if err := e.fs.Rmdir(ctx, "s3/bkt/out"); Errno(err) != syscall.ENOTEMPTY {
		t.Errorf("rmdir of a full dir: %v", err)
	}
	// Directory rename moves every key.
	if err := e.fs.Rename(ctx, "s3/bkt/out", "s3/bkt/moved", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	if got := e.names("s3/bkt/moved"); got != "b.txt l" {
		t.Errorf("moved dir = %q", got)
	}
	if err := e.fs.Rename(ctx, "s3/bkt/moved/b.txt", "s3/other/b.txt", RenameFlags{}); Errno(err) != syscall.EXDEV {
		t.Errorf("cross-bucket rename: %v", err)
	}
	if err := e.fs.Unlink(ctx, "s3/bkt/moved/b.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Getattr(ctx, "s3/bkt/moved/b.txt"); Errno(err) != syscall.ENOENT {
		t.Errorf("after unlink: %v", err)
	}
	if err := e.fs.Link(ctx, "s3/bkt/moved/l", "s3/bkt/moved/h"); Errno(err) != syscall.ENOTSUP {
		t.Errorf("link: %v", err)
	}
}

func TestBackendFailureIsEIO(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	e.stores["s3/bkt"] = nil // replaced below by a failing resolver
	fs := New(Options{}, Deps{
		Resolve: func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
			return nil, errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
		},
		Writeback: e.wb, Meta: e.fs.deps.Meta, Logger: e.fs.log,
	})
	_, err := fs.Getattr(context.Background(), "s3/bkt/x")
	if Errno(err) != syscall.EIO {
		t.Fatalf("Getattr with a dead backend: %v (errno %v), want EIO", err, Errno(err))
	}
}
