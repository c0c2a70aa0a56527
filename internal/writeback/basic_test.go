package writeback

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

func TestCreateWriteClose(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"small", 100},
		{"one part", testPart},
		{"multipart", 5*testPart + 123},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			data := pattern(tc.size, 1)
			f := writeFile(t, m, "dir/a", data)
			if got := m.Get(tgt("dir/a")); got != f && !f.Durable() {
				t.Fatalf("Get after close = %v, want the pending file", got)
			}
			drain(t, m)
			e.wantObject("dir/a", data)
			if !f.Durable() || f.Version() == "" {
				t.Errorf("Durable %v Version %q after drain", f.Durable(), f.Version())
			}
			if m.Get(tgt("dir/a")) != nil {
				t.Errorf("Get after drain: the durable file is still listed")
			}
			st := m.Stats()
			if st.PendingFiles != 0 || st.UploadedObjects != 1 {
				t.Errorf("Stats = %+v", st)
			}
			assertStagingEmpty(t, m)
		})
	}
}

// assertStagingEmpty waits until the journal has no live record and the
// staging dir holds no data file but spares (the staging of a durable file
// is recycled just after it is reported durable).
func assertStagingEmpty(t *testing.T, m *Manager) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := stagingLeft(t, m)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("staging dir still holds %v", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stagingLeft lists live journal ids and data files that are no spares.
func stagingLeft(t *testing.T, m *Manager) []string {
	ents, err := os.ReadDir(m.j.dir)
	if err != nil {
		t.Fatal(err)
	}
	m.spareMu.Lock()
	spare := map[string]bool{}
	for _, id := range m.spares {
		spare[id+dataExt] = true
	}
	for _, s := range m.ready {
		spare[s.id+dataExt] = true
	}
	m.spareMu.Unlock()
	var left []string
	for _, ent := range ents {
		if n := ent.Name(); n != lockName && n != logName && !spare[n] {
			left = append(left, n)
		}
	}
	m.j.mu.Lock()
	for id := range m.j.live {
		left = append(left, "record "+id)
	}
	m.j.mu.Unlock()
	return left
}

func TestStagingPermissions(t *testing.T) {
	e := newEnv(t)
	e.dir = filepath.Join(e.dir, "wb")
	m := e.manager()
	f, err := m.Create(tgt("a"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{e.dir, m.j.dir} {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("staging dir %s mode %v, %v", dir, st.Mode(), err)
		}
	}
	st, err := os.Stat(m.j.dataPath(f.id))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("data file mode %v, %v", st.Mode(), err)
	}
	if _, err := New(context.Background(), e.config(), nil); err == nil {
		t.Fatal("New with a nil resolver succeeded")
	}
}

func TestRandomWrites(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			rng := rand.New(rand.NewPCG(seed, seed))
			f, err := m.Create(tgt("r"), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire()
			var model []byte
			for i := range 200 {
				off := rng.IntN(6 * testPart)
				n := 1 + rng.IntN(3000)
				p := pattern(n, byte(i))
				if _, err := f.WriteAt(p, int64(off)); err != nil {
					t.Fatal(err)
				}
				if off+n > len(model) {
					model = append(model, make([]byte, off+n-len(model))...)
				}
				copy(model[off:], p)
				if i%50 == 0 {
					cut := rng.IntN(len(model) + 1)
					if err := f.Truncate(int64(cut)); err != nil {
						t.Fatal(err)
					}
					model = model[:cut]
				}
			}
			got := make([]byte, len(model)+10)
			n, err := f.ReadAt(context.Background(), got, 0)
			if n != len(model) || err != io.EOF || !bytes.Equal(got[:n], model) {
				t.Fatalf("ReadAt = %d, %v; equal %v", n, err, bytes.Equal(got[:n], model))
			}
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
			drain(t, m)
			e.wantObject("r", model)
		})
	}
}

func TestTruncate(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("t"), 0o644)
	f.Acquire()
	f.WriteAt(pattern(1000, 1), 0)
	if err := f.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(20); err != nil {
		t.Fatal(err)
	}
	if f.Size() != 20 {
		t.Fatalf("Size %d", f.Size())
	}
	f.Release()
	drain(t, m)
	want := append(pattern(1000, 1)[:10:10], make([]byte, 10)...)
	e.wantObject("t", want)
	if err := f.Truncate(-1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Truncate(-1) = %v", err)
	}
}

func TestSymlink(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	if err := m.Symlink(tgt("o/l"), "c"); err != nil {
		t.Fatal(err)
	}
	if f := m.Get(tgt("o/l")); f != nil && f.Symlink() != "c" {
		t.Fatalf("Get: symlink %q", f.Symlink())
	}
	drain(t, m)
	info, err := e.mem.Stat(context.Background(), "o/l")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 0 || info.Metadata[MetaSymlink] != "c" {
		t.Fatalf("symlink object %+v", info)
	}
	if _, err := writeFile(t, m, "x", nil).WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err) // a dropped file comes back
	}
	if err := m.Symlink(tgt(""), "c"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Symlink at the bucket root = %v", err)
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	e.setFaults(faulty.Config{Stall: func(op, key string) time.Duration {
		if op == faulty.OpPut {
			return faulty.Forever
		}
		return 0
	}})
	m := e.manager()
	f := writeFile(t, m, "gone", []byte("hello"))
	waitFor(t, "the upload to start", func() bool { return e.fs.Calls(faulty.OpPut) > 0 })
	m.Remove(tgt("gone"))
	if m.Get(tgt("gone")) != nil {
		t.Fatal("Get after Remove")
	}
	drain(t, m)
	e.wantNoObject("gone")
	if f.Durable() {
		t.Error("a removed file reports Durable")
	}
	assertStagingEmpty(t, m)
}

// TestRemoveAfterSync: a file removed once durable, while its upload
// still holds the claim on its key (here: deleting the old name of a
// rename), left no stray: its object is not reported as pending delete
// (vfs materialization removes the link's dirty file right after Sync,
// and a stat then answered ENOENT for the copy just written).
func TestRemoveAfterSync(t *testing.T) {
	e := newEnv(t)
	g := e.gate(func(op, key string) bool { return op == faulty.OpDelete && key == "old" })
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.manager()
	orig := pattern(2*testPart, 5)
	e.putObject("old", orig)
	f := openBase(t, e, m, "old")
	f.WriteAt([]byte("tail"), int64(len(orig)))
	vfsRename(t, e, m, "old", "new")
	f.Release()
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delete of old", func() bool { return g.held.Load() == 1 })
	m.Remove(tgt("new"))
	if m.PendingDelete(tgt("new")) {
		t.Error("new, durable before its removal, is reported as pending delete")
	}
	g.release()
	drain(t, m)
	e.wantObject("new", append(orig, "tail"...))
}

func TestRemoveOpenKeepsData(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("tmp"), 0o600)
	f.Acquire()
	f.WriteAt([]byte("scratch"), 0)
	m.Remove(tgt("tmp"))
	f.WriteAt([]byte("S"), 0)
	buf := make([]byte, 7)
	if n, err := f.ReadAt(context.Background(), buf, 0); n != 7 || string(buf) != "Scratch" {
		t.Fatalf("read of an unlinked open file: %q, %v", buf[:n], err)
	}
	f.Release()
	drain(t, m)
	e.wantNoObject("tmp")
}

func TestSyncWhileOpen(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	f.WriteAt([]byte("one"), 0)
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.wantObject("s", []byte("one"))
	if !f.Durable() {
		t.Fatal("not Durable after Sync")
	}
	f.WriteAt([]byte("two"), 3)
	buf := make([]byte, 6)
	if n, _ := f.ReadAt(context.Background(), buf, 0); string(buf[:n]) != "onetwo" {
		t.Fatalf("read after sync and write: %q", buf[:n])
	}
	f.Release()
	drain(t, m)
	e.wantObject("s", []byte("onetwo"))
}

func TestSyncReportsError(t *testing.T) {
	e := newEnv(t)
	e.setFaults(faulty.Config{Fail: func(op, key string) error {
		if op == faulty.OpPut {
			return objstore.ErrPermission
		}
		return nil
	}})
	m := e.manager()
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	f.WriteAt([]byte("x"), 0)
	if err := f.Sync(context.Background()); !errors.Is(err, objstore.ErrPermission) {
		t.Fatalf("Sync = %v, want ErrPermission", err)
	}
	f.Release()
}

func TestMetadata(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("m"), 0o640)
	f.Acquire()
	f.WriteAt([]byte("x"), 0)
	mt := time.Unix(1700000000, 5)
	f.SetModTime(mt)
	f.SetMode(0o755)
	f.Release()
	drain(t, m)
	info, err := e.mem.Stat(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata[MetaMode] != "755" || info.Metadata[MetaMtime] != strconv.FormatInt(mt.UnixNano(), 10) {
		t.Fatalf("metadata %v", info.Metadata)
	}
	// chmod of an unchanged object is a server-side copy, not an upload.
	puts := e.fs.Calls(faulty.OpPut)
	g, err := m.OpenBase(context.Background(), tgt("m"), info)
	if err != nil {
		t.Fatal(err)
	}
	g.SetMode(0o600)
	drain(t, m)
	info, _ = e.mem.Stat(context.Background(), "m")
	if info.Metadata[MetaMode] != "600" || e.fs.Calls(faulty.OpPut) != puts || e.fs.Calls(faulty.OpCopy) != 1 {
		t.Fatalf("chmod: metadata %v, puts %d→%d, copies %d", info.Metadata, puts, e.fs.Calls(faulty.OpPut), e.fs.Calls(faulty.OpCopy))
	}
	e.wantObject("m", []byte("x"))
}

func TestPutOptions(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.PutOptions = func(t Target) objstore.PutOptions {
		return objstore.PutOptions{Tags: map[string]string{"t": "1"}, Metadata: map[string]string{"a": t.Key}, IfAbsent: true}
	}
	m := e.open(cfg)
	writeFile(t, m, "k", []byte("v"))
	writeFile(t, m, "k", []byte("w")) // IfAbsent is not passed on
	drain(t, m)
	info, _ := e.mem.Stat(context.Background(), "k")
	tags, _ := e.mem.Tags("k")
	if info.Metadata["a"] != "k" || tags["t"] != "1" {
		t.Fatalf("metadata %v tags %v", info.Metadata, tags)
	}
	e.wantObject("k", []byte("w"))
}

func TestStop(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("open"), 0o644)
	f.Acquire()
	m.Stop()
	if _, err := m.Create(tgt("b"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("Create after Stop = %v", err)
	}
	if _, err := m.OpenBase(context.Background(), tgt("c"), objstore.ObjectInfo{Key: "c"}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("OpenBase after Stop = %v", err)
	}
	if err := m.Symlink(tgt("l"), "x"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("Symlink after Stop = %v", err)
	}
	if _, err := f.WriteAt([]byte("still"), 0); err != nil {
		t.Errorf("write to an open file after Stop: %v", err)
	}
	f.Release()
	drain(t, m)
	e.wantObject("open", []byte("still"))
}

func TestReleaseWithoutAcquire(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("a"), 0o644)
	if err := f.Release(); err == nil {
		t.Fatal("Release without Acquire succeeded")
	}
}

func TestList(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	for _, k := range []string{"d/b", "d/a", "e/c", "d/sub/x"} {
		f, _ := m.Create(tgt(k), 0o644)
		f.Acquire()
		defer f.Release()
	}
	var keys []string
	for _, f := range m.List("s3", "bkt", "d/") {
		keys = append(keys, f.Target().Key)
	}
	if got, want := keys, []string{"d/a", "d/b", "d/sub/x"}; !slicesEqual(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if len(m.List("gs", "bkt", "")) != 0 {
		t.Fatal("List of another scheme")
	}
	for _, tc := range []struct {
		scheme, prefix string
		want           bool
	}{
		{"s3", "d/", true},
		{"s3", "d/sub/", true},
		{"s3", "e/c", true},
		{"s3", "f/", false},
		{"gs", "", false},
	} {
		if got := m.HasUnder(tc.scheme, "bkt", tc.prefix); got != tc.want {
			t.Errorf("HasUnder(%s, %q) = %v, want %v", tc.scheme, tc.prefix, got, tc.want)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestENOSPC(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	free := int64(100 << 20)
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	cfg.FreeSpace = func() (int64, error) {
		<-mu
		defer func() { mu <- struct{}{} }()
		return free, nil
	}
	cfg.MinFreeBytes = 64 << 20
	m := e.open(cfg)
	f, _ := m.Create(tgt("full"), 0o644)
	f.Acquire()
	data := pattern(1000, 3)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	<-mu
	free = 64<<20 + 10 // the budget of the first probe is used up first
	mu <- struct{}{}
	var err error
	for i := 0; i < 100000 && err == nil; i++ {
		_, err = f.WriteAt(pattern(1<<20, 4), 1<<30)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteAt on a full disk = %v, want ENOSPC", err)
	}
	if err := f.Truncate(1000); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(); err != nil {
		t.Fatalf("Release after ENOSPC: %v", err)
	}
	drain(t, m)
	e.wantObject("full", data)
}
