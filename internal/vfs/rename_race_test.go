package vfs

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// raceStore holds the uploads (Put, Complete) of one key until a gate
// opens (or their context ends), and calls a hook once a List returned.
type raceStore struct {
	*faulty.Store
	gate  *gate
	after atomic.Pointer[func(opts objstore.ListOptions)]
}

func (s *raceStore) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	p, err := s.Store.List(ctx, opts)
	if fn := s.after.Load(); fn != nil {
		(*fn)(opts)
	}
	return p, err
}

func (s *raceStore) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.gate.wait(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, src, size, opts)
}

func (s *raceStore) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	u, err := s.Store.CreateUpload(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &raceUpload{Upload: u, key: key, gate: s.gate}, nil
}

type raceUpload struct {
	objstore.Upload
	key  string
	gate *gate
}

func (u *raceUpload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	if err := u.gate.wait(ctx, u.key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return u.Upload.Complete(ctx)
}

// gate holds the uploads of one key until opened.
type gate struct {
	key    string
	once   sync.Once
	open   chan struct{}
	caught chan struct{} // closed when an upload of key is held
	cOnce  sync.Once
}

func newGate(key string) *gate {
	return &gate{key: key, open: make(chan struct{}), caught: make(chan struct{})}
}

func (g *gate) wait(ctx context.Context, key string) error {
	if key != g.key {
		return nil
	}
	g.cOnce.Do(func() { close(g.caught) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// waitCaught waits until an upload of the gate's key is held.
func (g *gate) waitCaught(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-g.caught:
	case <-ctx.Done():
		t.Fatalf("the upload of %s never started", g.key)
	}
}

// writeRelease writes p at off through h and closes it.
func writeRelease(t *testing.T, h *Handle, p []byte, off int64) {
	t.Helper()
	if _, err := h.Write(p, off); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

// raceEnv is an FS over one mem bucket (s3/bkt) whose uploads of one key
// wait at a gate and whose List calls a hook once answered.
type raceEnv struct {
	fs   *FS
	wb   *writeback.Manager
	mem  *mem.Store
	hook *raceStore
}

func newRaceEnv(t *testing.T, g *gate) *raceEnv {
	t.Helper()
	e := &raceEnv{mem: mem.New(mem.Options{Bucket: "bkt"})}
	e.hook = &raceStore{Store: faulty.New(e.mem, faulty.Config{}), gate: g}
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return e.hook, nil
		}
		return nil, objstore.ErrNoBucket
	}
	e.fs, e.wb = newTestFS(t, resolve, 10000, 64<<20)
	t.Cleanup(g.release)
	return e
}

// TestRenameDirRacesUpload: `mv o/sub o/sub2` while the upload of
// o/sub/m.txt is finishing. The upload is held until the rename has
// listed o/sub/ in the bucket, then lands (and the file is dropped as
// durable) before the rename looks at the dirty files: the file must
// end up at o/sub2/m.txt and nowhere else, whatever the order.
func TestRenameDirRacesUpload(t *testing.T) {
	for i := range 20 {
		t.Run("", func(t *testing.T) { renameDirRace(t, i%2 == 1) })
	}
}

func renameDirRace(t *testing.T, landFirst bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := newGate("o/sub/m.txt")
	e := newRaceEnv(t, g)
	if err := e.fs.Mkdir(ctx, "s3/bkt/o"); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Mkdir(ctx, "s3/bkt/o/sub"); err != nil {
		t.Fatal(err)
	}
	h, err := e.fs.Create(ctx, "s3/bkt/o/sub/m.txt", 0o644, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	writeRelease(t, h, []byte("moved\n"), 0)
	g.waitCaught(ctx, t)
	src := writeback.Target{Scheme: "s3", Bucket: "bkt", Key: "o/sub/m.txt"}
	land := func() {
		// Let the upload land and wait until the file is durable and
		// forgotten (or renamed away) by writeback.
		g.release()
		for e.wb.Get(src) != nil && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	if landFirst {
		land()
	} else {
		// A rename that re-keys the file first waits for the upload in
		// flight to its old name (which may land regardless): let it land
		// a moment later.
		tm := time.AfterFunc(200*time.Millisecond, g.release)
		defer tm.Stop()
	}
	after := func(opts objstore.ListOptions) {
		if strings.HasPrefix(opts.Prefix, "o/sub/") {
			land()
		}
	}
	e.hook.after.Store(&after)
	if err := e.fs.Rename(ctx, "s3/bkt/o/sub", "s3/bkt/o/sub2", RenameFlags{}); err != nil {
		t.Fatal(err)
	}
	e.hook.after.Store(nil)
	g.release()
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := e.mem.NewReader(ctx, "o/sub2/m.txt", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("o/sub2/m.txt is not in the bucket: %v", err)
	}
	b, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || string(b) != "moved\n" {
		t.Errorf("o/sub2/m.txt = %q, %v", b, err)
	}
	if _, err := e.mem.Stat(ctx, "o/sub/m.txt"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("o/sub/m.txt is still in the bucket: %v", err)
	}
	if ents, err := e.fs.Readdir(ctx, "s3/bkt/o/sub2"); err != nil || len(ents) != 1 || ents[0].Name != "m.txt" {
		t.Errorf("readdir o/sub2 = %v, %v", ents, err)
	}
}

// TestReaddirRacesUpload: a readdir while the upload of a file of the
// directory is finishing. The upload lands (and writeback forgets the
// durable file) right after the bucket was listed: the file must be
// listed all the same.
func TestReaddirRacesUpload(t *testing.T) {
	for range 10 {
		t.Run("", readdirRace)
	}
}

func readdirRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := newGate("d/c")
	e := newRaceEnv(t, g)
	if err := e.fs.Mkdir(ctx, "s3/bkt/d"); err != nil {
		t.Fatal(err)
	}
	h, err := e.fs.Create(ctx, "s3/bkt/d/c", 0o644, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write([]byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.caught:
	case <-ctx.Done():
		t.Fatal("the upload of d/c never started")
	}
	e.fs.deps.Meta.Clear() // the listing comes from the bucket
	c := writeback.Target{Scheme: "s3", Bucket: "bkt", Key: "d/c"}
	after := func(opts objstore.ListOptions) {
		if opts.Prefix == "d/" {
			g.release()
			for e.wb.Get(c) != nil && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
		}
	}
	e.hook.after.Store(&after)
	ents, err := e.fs.Readdir(ctx, "s3/bkt/d")
	e.hook.after.Store(nil)
	if err != nil || len(ents) != 1 || ents[0].Name != "c" {
		t.Errorf("readdir d = %v, %v; want c", ents, err)
	}
}

// TestInterruptAfterPointOfNoReturn: an unlink or rename of a dirty file
// interrupted (EINTR: its context cancelled) while it waits for the upload
// in flight to the old name has happened all the same, so it reports
// success: a retry would fail with ENOENT.
func TestInterruptAfterPointOfNoReturn(t *testing.T) {
	for _, op := range []string{"unlink", "rename"} {
		t.Run(op, func(t *testing.T) {
			g := newGate("d/x")
			e := newRaceEnv(t, g)
			bg := context.Background()
			if err := e.fs.Mkdir(bg, "s3/bkt/d"); err != nil {
				t.Fatal(err)
			}
			h, err := e.fs.Create(bg, "s3/bkt/d/x", 0o644, OpenFlags{Write: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Write([]byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
			<-g.caught
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(50*time.Millisecond, cancel)
			time.AfterFunc(150*time.Millisecond, g.release)
			if op == "unlink" {
				err = e.fs.Unlink(ctx, "s3/bkt/d/x")
			} else {
				err = e.fs.Rename(ctx, "s3/bkt/d/x", "s3/bkt/d/y", RenameFlags{})
			}
			if err != nil {
				t.Fatalf("%s interrupted after it took effect: %v", op, err)
			}
			if err := e.wb.Drain(bg); err != nil {
				t.Fatal(err)
			}
			if _, err := e.mem.Stat(bg, "d/x"); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("d/x is in the bucket: %v", err)
			}
			if _, err := e.mem.Stat(bg, "d/y"); (op == "rename") != (err == nil) {
				t.Errorf("d/y: %v", err)
			}
		})
	}
}
