package vfs

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// remount drains e's writeback and returns a new FS (fresh caches, fresh
// writeback) over the same stores: what a remount sees.
func (e *matEnv) remount() *FS {
	e.t.Helper()
	e.drain()
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if st, ok := e.stores[scheme+"/"+bucket]; ok {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	fs, _ := newTestFS(e.t, resolve, 10000, 256<<20)
	return fs
}

func mustAttr(t *testing.T, fs *FS, p string) Attr {
	t.Helper()
	a, err := fs.Getattr(context.Background(), p)
	if err != nil {
		t.Fatalf("getattr %s: %v", p, err)
	}
	return a
}

// TestSpecialFiles: mknod of a FIFO, a socket and devices makes names of
// that kind, mode, owner and device number, kept across a remount (an
// empty object with the type in its metadata), and refused twice.
func TestSpecialFiles(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	ctx := WithCaller(context.Background(), Caller{Uid: 1000, Gid: 100})
	tests := []struct {
		name string
		mode uint32
		rdev uint32
		kind Kind
	}{
		{name: "fifo", mode: syscall.S_IFIFO | 0o640, kind: KindFifo},
		{name: "sock", mode: syscall.S_IFSOCK | 0o755, kind: KindSocket},
		{name: "chr", mode: syscall.S_IFCHR | 0o600, rdev: 0x0103, kind: KindChar},
		{name: "blk", mode: syscall.S_IFBLK | 0o660, rdev: 0x0801, kind: KindBlock},
		{name: "reg", mode: syscall.S_IFREG | 0o604, kind: KindFile},
	}
	check := func(fs *FS, when string) {
		for _, tt := range tests {
			a := mustAttr(t, fs, "s3/bkt/"+tt.name)
			if a.Kind != tt.kind || a.Mode != tt.mode&0o7777 || a.Rdev != tt.rdev || a.Uid != 1000 || a.Gid != 100 || a.Size != 0 {
				t.Errorf("%s: %s = kind %v mode %o rdev %x owner %d:%d size %d; want kind %v mode %o rdev %x owner 1000:100",
					when, tt.name, a.Kind, a.Mode, a.Rdev, a.Uid, a.Gid, a.Size, tt.kind, tt.mode&0o7777, tt.rdev)
			}
		}
	}
	for _, tt := range tests {
		if err := e.fs.Mknod(ctx, "s3/bkt/"+tt.name, tt.mode, tt.rdev); err != nil {
			t.Fatalf("mknod %s: %v", tt.name, err)
		}
		if err := e.fs.Mknod(ctx, "s3/bkt/"+tt.name, tt.mode, tt.rdev); Errno(err) != syscall.EEXIST {
			t.Errorf("mknod %s again: %v, want EEXIST", tt.name, err)
		}
	}
	check(e.fs, "staged")
	if got := e.names("s3/bkt"); got != "blk chr fifo reg sock" {
		t.Errorf("readdir = %q", got)
	}
	fs2 := e.remount()
	if _, err := fs2.Readdir(context.Background(), "s3/bkt"); err != nil {
		t.Fatal(err)
	}
	check(fs2, "after a remount")
	if _, err := fs2.Open(context.Background(), "s3/bkt/fifo", OpenFlags{}); Errno(err) != syscall.ENXIO {
		t.Errorf("open of a FIFO through vfs: %v, want ENXIO (the kernel opens it)", err)
	}
}

// TestAttrsPersisted: mode, owner and nanosecond times set on files,
// directories and symlinks (written here or not) read back at once and
// after a remount.
func TestAttrsPersisted(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	e.put("s3/bkt", "old", "written by another tool")
	bg := context.Background()
	ctx := WithCaller(bg, Caller{Uid: 1000, Gid: 100})
	h, err := e.fs.Create(ctx, "s3/bkt/f", 0o640, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("data"), 0)
	h.Release()
	if err := e.fs.MkdirMode(ctx, "s3/bkt/d", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Symlink(ctx, "s3/bkt/l", "f"); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1600000000, 123456789)
	at := time.Unix(1500000000, 987654321)
	u, g, mode := uint32(65534), uint32(65533), uint32(0o4751)
	for _, p := range []string{"s3/bkt/f", "s3/bkt/d", "s3/bkt/l", "s3/bkt/old"} {
		s := SetAttr{Uid: &u, Gid: &g, Mtime: &mt, Atime: &at}
		if !strings.HasSuffix(p, "/l") {
			s.Mode = &mode
		}
		if _, err := e.fs.Setattr(bg, p, nil, s); err != nil {
			t.Fatalf("setattr %s: %v", p, err)
		}
	}
	check := func(fs *FS, when string) {
		for _, tt := range []struct {
			p    string
			mode uint32
			size int64
		}{{"s3/bkt/f", mode, 4}, {"s3/bkt/d", mode, 0}, {"s3/bkt/l", 0o777, 1}, {"s3/bkt/old", mode, 23}} {
			a := mustAttr(t, fs, tt.p)
			if a.Mode != tt.mode || a.Uid != u || a.Gid != g || !a.Mtime.Equal(mt) || !a.Atime.Equal(at) || (tt.size > 0 && a.Size != tt.size) {
				t.Errorf("%s: %s = mode %o owner %d:%d mtime %v atime %v size %d; want mode %o owner %d:%d mtime %v atime %v size %d",
					when, tt.p, a.Mode, a.Uid, a.Gid, a.Mtime, a.Atime, a.Size, tt.mode, u, g, mt, at, tt.size)
			}
			if a.Ctime.Before(a.Mtime) || time.Since(a.Ctime) > time.Minute {
				t.Errorf("%s: %s ctime %v, want the time of the change", when, tt.p, a.Ctime)
			}
		}
	}
	check(e.fs, "in the mount")
	fs2 := e.remount()
	check(fs2, "after a remount")
	// Lookups answered by a listing see the same.
	if _, err := fs2.Readdir(bg, "s3/bkt"); err != nil {
		t.Fatal(err)
	}
	check(fs2, "after a readdir")
	if got, _, _ := e.object("s3/bkt", "old"); got != "written by another tool" {
		t.Errorf("the object whose attributes changed reads %q", got)
	}
}

// TestCreateModes: create, mkdir and symlink keep the caller as owner and
// the mode given; a directory's own mode is its marker's.
func TestCreateModes(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	ctx := WithCaller(context.Background(), Caller{Uid: 7, Gid: 8})
	h, err := e.fs.Create(ctx, "s3/bkt/f", 0, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if err := e.fs.MkdirMode(ctx, "s3/bkt/d", 0o151); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []*FS{e.fs, e.remount()} {
		if a := mustAttr(t, fs, "s3/bkt/f"); a.Mode != 0 || a.Uid != 7 || a.Gid != 8 {
			t.Errorf("file created with mode 0: mode %o owner %d:%d", a.Mode, a.Uid, a.Gid)
		}
		if a := mustAttr(t, fs, "s3/bkt/d"); a.Mode != 0o151 || a.Uid != 7 || a.Gid != 8 {
			t.Errorf("directory made with mode 0151: mode %o owner %d:%d", a.Mode, a.Uid, a.Gid)
		}
	}
	_, md, ok := e.object("s3/bkt", "d/")
	if !ok || md[writeback.MetaMode] != "151" || md[writeback.MetaUid] != "7" {
		t.Errorf("marker d/: %v %v", md, ok)
	}
}

// TestLongSymlink: targets that metadata cannot hold (long, non-ASCII,
// a leading space) are kept in the object's body, read back at once,
// after a remount and from a listing; one over PATH_MAX is refused.
func TestLongSymlink(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	bg := context.Background()
	targets := map[string]string{
		"long":  strings.Repeat("abcdefghij/", 363) + "x", // 3,994 bytes
		"utf8":  "données/α",
		"space": " leading space",
		"short": "plain",
		"max":   strings.Repeat("y", 4095),
	}
	for n, tg := range targets {
		if err := e.fs.Symlink(bg, "s3/bkt/"+n, tg); err != nil {
			t.Fatalf("symlink %s: %v", n, err)
		}
	}
	if err := e.fs.Symlink(bg, "s3/bkt/toolong", strings.Repeat("z", 4096)); Errno(err) != syscall.ENAMETOOLONG {
		t.Errorf("symlink with a 4,096-byte target: %v, want ENAMETOOLONG", err)
	}
	check := func(fs *FS, when string) {
		for n, tg := range targets {
			a := mustAttr(t, fs, "s3/bkt/"+n)
			got, err := fs.Readlink(bg, "s3/bkt/"+n)
			if a.Kind != KindSymlink || a.Size != int64(len(tg)) || err != nil || got != tg {
				t.Errorf("%s: %s is kind %v size %d, readlink %d bytes (%v); want a symlink of %d bytes", when, n, a.Kind, a.Size, len(got), err, len(tg))
			}
		}
	}
	check(e.fs, "staged")
	fs2 := e.remount()
	if _, err := fs2.Readdir(bg, "s3/bkt"); err != nil {
		t.Fatal(err)
	}
	check(fs2, "after a remount and a readdir")
	body, md, _ := e.object("s3/bkt", "long")
	if len(body) != writeback.SymlinkBodySize || md[writeback.MetaSymlinkBody] == "" {
		t.Errorf("long target: body %d bytes, metadata %v", len(body), md)
	}
	if body, md, _ := e.object("s3/bkt", "short"); body != "" || md[writeback.MetaSymlink] != "plain" {
		t.Errorf("short target: body %q, metadata %v", body, md)
	}
}

// TestDirTimes: creating and removing entries sets the directory's
// modification and change times (in the mount); renaming a clean file
// sets its change time and keeps its modification time.
func TestDirTimes(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	bg := context.Background()
	e.put("s3/bkt", "d/old", "x") // d has no marker
	before := mustAttr(t, e.fs, "s3/bkt/d")
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() error { e.write("s3/bkt/d/f", "y"); return nil }},
		{"mkdir", func() error { return e.fs.Mkdir(bg, "s3/bkt/d/sub") }},
		{"symlink", func() error { return e.fs.Symlink(bg, "s3/bkt/d/l", "f") }},
		{"unlink", func() error { return e.fs.Unlink(bg, "s3/bkt/d/l") }},
		{"rmdir", func() error { return e.fs.Rmdir(bg, "s3/bkt/d/sub") }},
		{"rename", func() error { return e.fs.Rename(bg, "s3/bkt/d/old", "s3/bkt/d/new", RenameFlags{}) }},
	}
	for _, st := range steps {
		time.Sleep(2 * time.Millisecond)
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		a := mustAttr(t, e.fs, "s3/bkt/d")
		if !a.Mtime.After(before.Mtime) || !a.Ctime.After(before.Ctime) {
			t.Errorf("after %s: directory mtime %v ctime %v, not after %v %v", st.name, a.Mtime, a.Ctime, before.Mtime, before.Ctime)
		}
		before = a
	}
	a := mustAttr(t, e.fs, "s3/bkt/d/new")
	if time.Since(a.Ctime) > time.Minute || a.Ctime.Equal(a.Mtime) {
		t.Errorf("renamed clean file: ctime %v mtime %v, want ctime now and the old mtime", a.Ctime, a.Mtime)
	}
}

// TestRenameDirKeepsAttrs: a renamed directory keeps its marker's mode
// and owner.
func TestRenameDirKeepsAttrs(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	ctx := WithCaller(context.Background(), Caller{Uid: 3, Gid: 4})
	if err := e.fs.MkdirMode(ctx, "s3/bkt/a", 0o710); err != nil {
		t.Fatal(err)
	}
	e.write("s3/bkt/a/f", "z")
	e.drain()
	if err := e.fs.Rename(ctx, "s3/bkt/a", "s3/bkt/b", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []*FS{e.fs, e.remount()} {
		if a := mustAttr(t, fs, "s3/bkt/b"); a.Mode != 0o710 || a.Uid != 3 || a.Gid != 4 {
			t.Errorf("renamed directory: mode %o owner %d:%d, want 0710 3:4", a.Mode, a.Uid, a.Gid)
		}
	}
}

// TestUnlinkedNlink: fstat of an open file that was unlinked shows
// st_nlink 0 (Attr.Unlinked).
func TestUnlinkedNlink(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	bg := context.Background()
	e.write("s3/bkt/f", "abc")
	for _, fl := range []OpenFlags{{}, {Write: true}} {
		e.write("s3/bkt/f", "abc")
		h, err := e.fs.Open(bg, "s3/bkt/f", fl)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := h.Attr(bg); a.Unlinked {
			t.Errorf("write=%v: linked file shows unlinked", fl.Write)
		}
		if err := e.fs.Unlink(bg, "s3/bkt/f"); err != nil {
			t.Fatal(err)
		}
		if a, err := h.Attr(bg); err != nil || !a.Unlinked || a.Size != 3 {
			t.Errorf("write=%v: unlinked file: %+v, %v; want Unlinked, size 3", fl.Write, a, err)
		}
		h.Release()
	}
}

// TestStatfsNameMax: statfs reports the name length ferry enforces.
func TestStatfsNameMax(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	if got := e.fs.StatFS().NameMax; got != NameMax {
		t.Errorf("NameMax = %d, want %d", got, NameMax)
	}
	if err := e.fs.Mkdir(context.Background(), "s3/bkt/"+strings.Repeat("n", NameMax+1)); Errno(err) != syscall.ENAMETOOLONG {
		t.Errorf("mkdir of a %d-byte name: %v, want ENAMETOOLONG", NameMax+1, err)
	}
}

// TestListedAttrs: lookups answered by a listing show each object's own
// attributes where listings carry metadata (GCS, Azure); where they do
// not (S3), those of objects this mount uploaded or stat'ed, ferry's
// defaults for others, or (ExactAttrs) a HEAD's.
func TestListedAttrs(t *testing.T) {
	for _, tt := range []struct {
		name       string
		noListMeta bool
		exact      bool
		wantRemote uint32 // mode of a file from an earlier mount, after a listing
	}{
		{name: "list-metadata", wantRemote: 0o700},
		{name: "no-list-metadata", noListMeta: true, wantRemote: 0o644},
		{name: "no-list-metadata-exact", noListMeta: true, exact: true, wantRemote: 0o700},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newMatEnv(t, mem.Options{NoListMetadata: tt.noListMeta})
			bg := context.Background()
			ctx := WithCaller(bg, Caller{Uid: 1000, Gid: 1000})
			h, err := e.fs.Create(ctx, "s3/bkt/d/f", 0o700, OpenFlags{Write: true})
			if err != nil {
				t.Fatal(err)
			}
			h.Write([]byte("x"), 0)
			h.Release()
			if err := e.fs.Symlink(ctx, "s3/bkt/d/l", "f"); err != nil {
				t.Fatal(err)
			}
			e.drain()
			e.fs.deps.Meta.Clear()
			if _, err := e.fs.Readdir(bg, "s3/bkt/d"); err != nil {
				t.Fatal(err)
			}
			if a := mustAttr(t, e.fs, "s3/bkt/d/f"); a.Mode != 0o700 || a.Uid != 1000 {
				t.Errorf("uploaded by this mount, after a listing: mode %o uid %d", a.Mode, a.Uid)
			}
			fs2 := e.remount()
			fs2.opts.ExactAttrs = tt.exact
			ents, err := fs2.Readdir(bg, "s3/bkt/d")
			if err != nil {
				t.Fatal(err)
			}
			if a := mustAttr(t, fs2, "s3/bkt/d/f"); a.Mode != tt.wantRemote {
				t.Errorf("after a remount and a listing: mode %o, want %o", a.Mode, tt.wantRemote)
			}
			if a := mustAttr(t, fs2, "s3/bkt/d/l"); a.Kind != KindSymlink {
				t.Errorf("symlink after a listing: kind %v", a.Kind)
			}
			for _, d := range ents {
				if want := !tt.noListMeta; d.Name == "l" && (d.Kind == KindSymlink) != want {
					t.Errorf("readdir shows l as kind %v", d.Kind)
				}
			}
			// A HEAD's metadata answers later listing lookups.
			fs2.deps.Meta.Clear()
			if a := mustAttr(t, fs2, "s3/bkt/d/f"); a.Mode != 0o700 {
				t.Errorf("stat: mode %o", a.Mode)
			}
			fs2.deps.Meta.Forget("s3/bkt/d/f")
			if _, err := fs2.Readdir(bg, "s3/bkt/d"); err != nil {
				t.Fatal(err)
			}
			if a := mustAttr(t, fs2, "s3/bkt/d/f"); a.Mode != 0o700 {
				t.Errorf("after a HEAD and a listing: mode %o", a.Mode)
			}
		})
	}
}

// TestDirUtimensAfterChange: times set on a directory win over the
// times of its earlier entry changes.
func TestDirUtimensAfterChange(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	bg := context.Background()
	if err := e.fs.Mkdir(bg, "s3/bkt/d"); err != nil {
		t.Fatal(err)
	}
	e.write("s3/bkt/d/f", "x")
	mt := time.Unix(1000000000, 1)
	if _, err := e.fs.Setattr(bg, "s3/bkt/d", nil, SetAttr{Mtime: &mt}); err != nil {
		t.Fatal(err)
	}
	if a := mustAttr(t, e.fs, "s3/bkt/d"); !a.Mtime.Equal(mt) {
		t.Errorf("mtime %v, want %v", a.Mtime, mt)
	}
}
