package vfs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// matEnv is an FS over two mem buckets, s3://bkt and s3://other.
type matEnv struct {
	t      *testing.T
	fs     *FS
	wb     *writeback.Manager
	stores map[string]*mem.Store
}

func newMatEnv(t *testing.T, memOpts mem.Options) *matEnv {
	t.Helper()
	e := &matEnv{t: t, stores: map[string]*mem.Store{}}
	for _, b := range []string{"bkt", "other"} {
		o := memOpts
		o.Bucket = b
		e.stores["s3/"+b] = mem.New(o)
	}
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if st, ok := e.stores[scheme+"/"+bucket]; ok {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	e.fs, e.wb = newTestFS(t, resolve, 10000, 256<<20)
	return e
}

// put stores an object directly in a bucket ("s3/bkt").
func (e *matEnv) put(bucket, key, body string) {
	e.t.Helper()
	if _, err := e.stores[bucket].Put(context.Background(), key, bytes.NewReader([]byte(body)), int64(len(body)), objstore.PutOptions{Metadata: map[string]string{"x-src": key}}); err != nil {
		e.t.Fatal(err)
	}
}

// write creates a file through the FS (a dirty file until uploaded).
func (e *matEnv) write(p, body string) {
	e.t.Helper()
	h, err := e.fs.Create(context.Background(), p, 0o644, OpenFlags{Write: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := h.Write([]byte(body), 0); err != nil {
		e.t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *matEnv) symlink(p, target string) {
	e.t.Helper()
	if err := e.fs.Symlink(context.Background(), p, target); err != nil {
		e.t.Fatal(err)
	}
}

// object returns the content and metadata of bucket/key, ok false if absent.
func (e *matEnv) object(bucket, key string) (string, map[string]string, bool) {
	e.t.Helper()
	rd, err := e.stores[bucket].NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if errors.Is(err, objstore.ErrNotFound) {
		return "", nil, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b), rd.Info().Metadata, true
}

func TestMaterializeFiles(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(e *matEnv) // creates s3/bkt/w/out as a link
		want     string
		wantMeta string // x-src of the copy
	}{
		{name: "relative link to a clean object", want: "data-in", wantMeta: "w/in.txt", setup: func(e *matEnv) {
			e.put("s3/bkt", "w/in.txt", "data-in")
			e.symlink("s3/bkt/w/out", "in.txt")
		}},
		{name: "absolute link into another directory", want: "shared", wantMeta: "data/x", setup: func(e *matEnv) {
			e.put("s3/bkt", "data/x", "shared")
			e.symlink("s3/bkt/w/out", "/fusion/s3/bkt/data/x")
		}},
		{name: "relative link climbing up", want: "shared", wantMeta: "data/x", setup: func(e *matEnv) {
			e.put("s3/bkt", "data/x", "shared")
			e.symlink("s3/bkt/w/out", "../data/x")
		}},
		{name: "chain of links (staged input re-emitted)", want: "deep", wantMeta: "data/deep", setup: func(e *matEnv) {
			e.put("s3/bkt", "data/deep", "deep")
			e.symlink("s3/bkt/w/in.txt", "/fusion/s3/bkt/data/deep")
			e.symlink("s3/bkt/w/out", "in.txt")
		}},
		{name: "dirty target written by the task", want: "fresh bytes", setup: func(e *matEnv) {
			e.write("s3/bkt/w/made.txt", "fresh bytes")
			e.symlink("s3/bkt/w/out", "made.txt")
		}},
		{name: "link already durable", want: "data-in", wantMeta: "w/in.txt", setup: func(e *matEnv) {
			e.put("s3/bkt", "w/in.txt", "data-in")
			e.symlink("s3/bkt/w/out", "in.txt")
			// Durable: drained (the link's dirty file may be forgotten
			// as soon as it landed, so it is not looked up in writeback),
			// then checked in the store.
			if err := e.wb.Drain(context.Background()); err != nil {
				e.t.Fatal(err)
			}
			if _, md, ok := e.object("s3/bkt", "w/out"); !ok {
				e.t.Fatal("the link is not in the bucket after the drain")
			} else if _, isLink := md[SymlinkMeta]; !isLink {
				e.t.Fatalf("the link object lacks the symlink metadata: %v", md)
			}
		}},
		{name: "cross-bucket stream copy", want: "far away", wantMeta: "x", setup: func(e *matEnv) {
			e.put("s3/other", "x", "far away")
			e.symlink("s3/bkt/w/out", "/fusion/s3/other/x")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newMatEnv(t, mem.Options{})
			ctx := context.Background()
			tc.setup(e)
			if err := e.fs.Materialize(ctx, "s3/bkt/w/out", "/fusion"); err != nil {
				t.Fatal(err)
			}
			body, md, ok := e.object("s3/bkt", "w/out")
			if !ok || body != tc.want {
				t.Fatalf("object = %q (present %v), want %q", body, ok, tc.want)
			}
			if _, isLink := md[SymlinkMeta]; isLink {
				t.Fatalf("copy still carries the symlink metadata: %v", md)
			}
			if tc.wantMeta != "" && md["x-src"] != tc.wantMeta {
				t.Fatalf("metadata = %v, want the source's", md)
			}
			if e.wb.Get(writeback.Target{Scheme: "s3", Bucket: "bkt", Key: "w/out"}) != nil {
				t.Fatal("the link's dirty file is still pending")
			}
			a, err := e.fs.Getattr(ctx, "s3/bkt/w/out")
			if err != nil || a.Kind != KindFile || a.Size != int64(len(tc.want)) {
				t.Fatalf("Getattr = %+v, %v", a, err)
			}
			ents, err := e.fs.Readdir(ctx, "s3/bkt/w")
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range ents {
				if de.Name == "out" && de.Kind != KindFile {
					t.Fatalf("Readdir shows out as %v", de.Kind)
				}
			}
			// Drain: nothing left to upload may bring the link back.
			if err := e.wb.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if body, _, _ := e.object("s3/bkt", "w/out"); body != tc.want {
				t.Fatalf("after drain: %q", body)
			}
		})
	}
}

func TestMaterializeDirectory(t *testing.T) {
	e := newMatEnv(t, mem.Options{})
	ctx := context.Background()
	e.put("s3/bkt", "data/dir/a", "A")
	e.put("s3/bkt", "data/dir/sub/b", "B")
	e.write("s3/bkt/data/dir/c", "C") // dirty: synced before the copy
	e.symlink("s3/bkt/w/results", "/fusion/s3/bkt/data/dir")
	if err := e.fs.Materialize(ctx, "s3/bkt/w/results", "/fusion"); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"w/results/a": "A", "w/results/sub/b": "B", "w/results/c": "C", "w/results/": ""} {
		if got, _, ok := e.object("s3/bkt", key); !ok || got != want {
			t.Errorf("%s = %q (present %v), want %q", key, got, ok, want)
		}
	}
	if _, _, ok := e.object("s3/bkt", "w/results"); ok {
		t.Error("the link object must be deleted")
	}
	a, err := e.fs.Getattr(ctx, "s3/bkt/w/results")
	if err != nil || a.Kind != KindDir {
		t.Fatalf("Getattr = %+v, %v", a, err)
	}
	ents, err := e.fs.Readdir(ctx, "s3/bkt/w/results")
	if err != nil || len(ents) != 3 {
		t.Fatalf("Readdir = %+v, %v", ents, err)
	}
}

func TestMaterializeErrors(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(e *matEnv)
		link   string
		target error // errors.Is target
	}{
		{name: "outside the mount", link: "s3/bkt/w/out", target: ErrOutsideMount,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "/etc/passwd") }},
		{name: "mount point prefix only by name", link: "s3/bkt/w/out", target: ErrOutsideMount,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "/fusionx/s3/bkt/a") }},
		{name: "climbs above the root", link: "s3/bkt/w/out", target: ErrOutsideMount,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "../../../../etc/passwd") }},
		{name: "a whole bucket", link: "s3/bkt/w/out", target: ErrOutsideMount,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "/fusion/s3/other") }},
		{name: "dangling", link: "s3/bkt/w/out", target: syscall.ENOENT,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "nothing-here") }},
		{name: "not a link", link: "s3/bkt/w/file", target: syscall.EINVAL,
			setup: func(e *matEnv) { e.put("s3/bkt", "w/file", "x") }},
		{name: "loop", link: "s3/bkt/w/out", target: syscall.ELOOP,
			setup: func(e *matEnv) { e.symlink("s3/bkt/w/out", "loop"); e.symlink("s3/bkt/w/loop", "out") }},
		{name: "directory linked into itself", link: "s3/bkt/w/self", target: syscall.ELOOP,
			setup: func(e *matEnv) { e.put("s3/bkt", "w/f", "x"); e.symlink("s3/bkt/w/self", ".") }},
		{name: "bucket root path", link: "s3/bkt", target: syscall.EINVAL, setup: func(*matEnv) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newMatEnv(t, mem.Options{})
			ctx := context.Background()
			tc.setup(e)
			err := e.fs.Materialize(ctx, tc.link, "/fusion")
			if !errors.Is(err, tc.target) {
				t.Fatalf("err = %v, want %v", err, tc.target)
			}
			if tc.target != syscall.EINVAL {
				if a, err := e.fs.Getattr(ctx, tc.link); err != nil || a.Kind != KindSymlink {
					t.Fatalf("the link must stay: %+v, %v", a, err)
				}
			}
		})
	}
}

func TestStreamCopyMultipart(t *testing.T) {
	ctx := context.Background()
	src := mem.New(mem.Options{Bucket: "src"})
	dst := mem.New(mem.Options{Bucket: "dst", MaxSinglePut: 10, MinPartSize: 5})
	body := bytes.Repeat([]byte("xyz"), 100)
	if _, err := src.Put(ctx, "k", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{Metadata: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	info, err := streamCopy(ctx, src, "k", dst, "k2")
	if err != nil || info.Size != int64(len(body)) {
		t.Fatalf("streamCopy = %+v, %v", info, err)
	}
	rd, err := dst.NewReader(ctx, "k2", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rd)
	rd.Close()
	if !bytes.Equal(got, body) || rd.Info().Metadata["a"] != "b" {
		t.Fatalf("copy differs: %d bytes, meta %v", len(got), rd.Info().Metadata)
	}
}

func TestRemoteReaderAt(t *testing.T) {
	ctx := context.Background()
	st := mem.New(mem.Options{})
	body := []byte("0123456789")
	info, err := st.Put(ctx, "k", bytes.NewReader(body), 10, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ra := &remoteReaderAt{ctx: ctx, st: st, key: "k", version: info.Version, size: 10}
	defer ra.Close()
	tests := []struct {
		off     int64
		n       int
		want    string
		wantErr error
	}{
		{off: 0, n: 4, want: "0123"},
		{off: 4, n: 4, want: "4567"}, // sequential: same body
		{off: 1, n: 2, want: "12"},   // rewind: reopened
		{off: 8, n: 4, want: "89", wantErr: io.EOF},
		{off: 10, n: 1, want: "", wantErr: io.EOF},
	}
	for _, tc := range tests {
		p := make([]byte, tc.n)
		n, err := ra.ReadAt(p, tc.off)
		if string(p[:n]) != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
			t.Errorf("ReadAt(%d, %d) = %q, %v; want %q, %v", tc.off, tc.n, p[:n], err, tc.want, tc.wantErr)
		}
	}
	// A new version of the object fails the pinned read.
	if _, err := st.Put(ctx, "k", bytes.NewReader([]byte("changed!!!")), 10, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ra.ReadAt(make([]byte, 3), 5); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("read of a replaced version: err = %v, want ErrPrecondition", err)
	}
}
