package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// wptMount is a mount over one mem bucket whose FUSE requests are
// counted (write passthrough: the kernel writes staging files itself).
type wptMount struct {
	testMount
	root string // the bucket's directory
	st   *mem.Store
	reg  *prometheus.Registry
}

func mountWPT(t *testing.T, passthrough string) *wptMount {
	t.Helper()
	reg := prometheus.NewRegistry()
	st := mem.New(mem.Options{Bucket: "bkt"})
	mcfg := meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Second, MaxEntries: 1000}
	root, wb, _, srv := mountWith(t, st, mcfg, Options{Passthrough: passthrough, Metrics: metrics.NewFUSE(reg), WriteThrough: func(uint32) bool { return true }}, filepath.Join(t.TempDir(), "blocks"))
	return &wptMount{testMount: testMount{dir: filepath.Dir(filepath.Dir(root)), srv: srv, wb: wb}, root: root, st: st, reg: reg}
}

// count returns the sum of the metric's series whose label has value.
func (m *wptMount) count(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += s.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func (m *wptMount) object(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.wb.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	r, err := m.st.NewReader(ctx, key, 0, -1, objstore.ReadOptions{})
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), true
}

func mustWrite(t *testing.T, fd int, p []byte, off int64) {
	t.Helper()
	if n, err := syscall.Pwrite(fd, p, off); err != nil || n != len(p) {
		t.Fatalf("pwrite at %d: %d, %v", off, n, err)
	}
}

// appenderOf creates p with first (a passthrough writer), opens it again
// with O_APPEND (passing through to the same staging file) and closes the
// first writer, so that a later writer cannot pass through; it returns the
// appender's fd.
func appenderOf(t *testing.T, p string, first []byte) int {
	t.Helper()
	w, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, first, 0)
	a, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(w)
	return a
}

func statSize(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size
}

// TestWritePassthrough: a file created through the mount is written by the
// kernel into its staging file (no FUSE WRITE reaches ferry), and ferry
// still sees every byte, size and change: stat during the writes, readers
// beside the writer, fsync, truncation, mappings, O_APPEND, unlink and
// rename while open; an existing object opened without O_TRUNC is written
// through ferry as before.
func TestWritePassthrough(t *testing.T) {
	data := bytes.Repeat([]byte("ferry-write-"), 300<<10) // 3.5 MiB
	for _, tc := range []struct {
		name     string
		run      func(t *testing.T, m *wptMount) (key string, want []byte)
		viaFerry bool // writes reach ferry (not passed through)
	}{
		{name: "create", run: func(t *testing.T, m *wptMount) (string, []byte) {
			p := filepath.Join(m.root, "d/out.bin")
			os.MkdirAll(filepath.Dir(p), 0o755)
			fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(data); off += 1 << 20 {
				mustWrite(t, fd, data[off:min(off+1<<20, len(data))], int64(off))
				if got, want := statSize(t, p), int64(min(off+1<<20, len(data))); got != want {
					t.Errorf("stat while writing: size %d, want %d", got, want)
				}
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil || st.Size != int64(len(data)) {
				t.Errorf("fstat: %d, %v", st.Size, err)
			}
			if err := syscall.Close(fd); err != nil {
				t.Fatal(err)
			}
			return "d/out.bin", data
		}},
		{name: "reader beside the writer", run: func(t *testing.T, m *wptMount) (string, []byte) {
			p := filepath.Join(m.root, "shared")
			w, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, w, []byte("first "), 0)
			r, err := syscall.Open(p, syscall.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, w, []byte("second"), 6)
			buf := make([]byte, 64)
			n, err := syscall.Pread(r, buf, 0)
			if err != nil || string(buf[:n]) != "first second" {
				t.Errorf("reader: %q, %v", buf[:n], err)
			}
			syscall.Close(r)
			syscall.Close(w)
			return "shared", []byte("first second")
		}},
		{name: "fsync while open", run: func(t *testing.T, m *wptMount) (string, []byte) {
			fd, err := syscall.Open(filepath.Join(m.root, "synced"), syscall.O_WRONLY|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[:1<<20], 0)
			if err := syscall.Fsync(fd); err != nil {
				t.Fatal(err)
			}
			r, err := m.st.NewReader(context.Background(), "synced", 0, -1, objstore.ReadOptions{})
			if err != nil {
				t.Fatalf("after fsync: %v", err)
			}
			var b bytes.Buffer
			b.ReadFrom(r)
			r.Close()
			if !bytes.Equal(b.Bytes(), data[:1<<20]) {
				t.Errorf("after fsync the object has %d bytes, want the 1 MiB written", b.Len())
			}
			mustWrite(t, fd, data[1<<20:2<<20], 1<<20)
			syscall.Close(fd)
			return "synced", data[:2<<20]
		}},
		{name: "ftruncate", run: func(t *testing.T, m *wptMount) (string, []byte) {
			p := filepath.Join(m.root, "trunc")
			fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[:1<<20], 0)
			if err := syscall.Ftruncate(fd, 1000); err != nil {
				t.Fatal(err)
			}
			if got := statSize(t, p); got != 1000 {
				t.Errorf("size after ftruncate: %d", got)
			}
			mustWrite(t, fd, []byte("x"), 2000)
			syscall.Close(fd)
			want := append(append(bytes.Clone(data[:1000]), make([]byte, 1000)...), 'x')
			return "trunc", want
		}},
		{name: "shared mapping", run: func(t *testing.T, m *wptMount) (string, []byte) {
			fd, err := syscall.Open(filepath.Join(m.root, "mapped"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Ftruncate(fd, 8192); err != nil {
				t.Fatal(err)
			}
			mm, err := unix.Mmap(fd, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Close(fd)                  // the mapping keeps the staging file open, not the FUSE file
			time.Sleep(300 * time.Millisecond) // its release and upload would run now
			copy(mm[4096:], "through the mapping")
			if err := unix.Munmap(mm); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 8192)
			copy(want[4096:], "through the mapping")
			return "mapped", want
		}},
		{name: "append", run: func(t *testing.T, m *wptMount) (string, []byte) {
			// (A second open of the closed file before it is durable
			// would be written through ferry: see writeback's external.go.)
			f, err := os.OpenFile(filepath.Join(m.root, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"one\n", "two\n"} {
				if _, err := f.WriteString(s); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			return "log", []byte("one\ntwo\n")
		}},
		{name: "reopened beside a writer", run: func(t *testing.T, m *wptMount) (string, []byte) {
			// The reopen cannot pass through (the file was closed before
			// it was durable): it gets a node of its own, whose
			// attributes the kernel must not cache while the appender
			// writes through the first node.
			p := filepath.Join(m.root, "reopened")
			a := appenderOf(t, p, data[:1<<20])
			r, err := syscall.Open(p, syscall.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Close(r)
			if n, err := syscall.Write(a, []byte("tail")); err != nil || n != 4 {
				t.Fatalf("append: %d, %v", n, err)
			}
			if got := statSize(t, p); got != 1<<20+4 {
				t.Errorf("stat after the append: size %d, want %d", got, 1<<20+4)
			}
			syscall.Close(a)
			return "reopened", append(bytes.Clone(data[:1<<20]), "tail"...)
		}},
		{name: "appended beside a writer, read back", viaFerry: true, run: func(t *testing.T, m *wptMount) (string, []byte) {
			// The reopen (split node, page cache) appends after the
			// passthrough appender moved the end: ferry writes it at the
			// true end (AppendAt) while the kernel put the bytes at its
			// stale size in the split node's page cache. A read through
			// the reopen must see the file as ferry has it: the node's
			// attributes are volatile, so the read refreshes them and the
			// size change drops that page cache (auto_inval_data).
			p := filepath.Join(m.root, "appended")
			a := appenderOf(t, p, data[:1<<20])
			r, err := syscall.Open(p, syscall.O_RDWR|syscall.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			mid := bytes.Repeat([]byte("A"), 4096)
			if n, err := syscall.Write(a, mid); err != nil || n != len(mid) {
				t.Fatalf("passthrough append: %d, %v", n, err)
			}
			if n, err := syscall.Write(r, []byte("tail")); err != nil || n != 4 {
				t.Fatalf("append through the reopen: %d, %v", n, err)
			}
			want := append(append(bytes.Clone(data[:1<<20]), mid...), "tail"...)
			got := make([]byte, 8192)
			n, err := syscall.Pread(r, got, 1<<20-100)
			if err != nil || !bytes.Equal(got[:n], want[1<<20-100:]) {
				t.Errorf("read through the reopen: %d bytes %q..., %v; want %d bytes %q...", n, got[100:min(n, 110)], err, len(want)-(1<<20-100), want[1<<20:1<<20+10])
			}
			syscall.Close(r)
			syscall.Close(a)
			return "appended", want
		}},
		{name: "streams while open", run: func(t *testing.T, m *wptMount) (string, []byte) {
			// Parts go while the file is open though ferry sees no write;
			// one rewritten after it was sent is sent again at the close.
			big := bytes.Repeat(data[:1<<20], 40)
			p := filepath.Join(m.root, "streamed")
			fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(big); off += 1 << 20 {
				mustWrite(t, fd, big[off:off+1<<20], int64(off))
			}
			deadline := time.Now().Add(10 * time.Second)
			for m.wb.Stats().UploadedBytes < 32<<20 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := m.wb.Stats().UploadedBytes; got < 32<<20 {
				t.Errorf("%d bytes uploaded while open, want the two full 16 MiB parts", got)
			}
			mustWrite(t, fd, []byte("patch"), 10)
			syscall.Close(fd)
			want := bytes.Clone(big)
			copy(want[10:], "patch")
			return "streamed", want
		}},
		{name: "existing object", viaFerry: true, run: func(t *testing.T, m *wptMount) (string, []byte) {
			m.st.Put(context.Background(), "old", bytes.NewReader([]byte("hello world")), 11, objstore.PutOptions{})
			fd, err := syscall.Open(filepath.Join(m.root, "old"), syscall.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, []byte("J"), 0)
			syscall.Close(fd)
			return "old", []byte("Jello world")
		}},
		{name: "unlink while open", run: func(t *testing.T, m *wptMount) (string, []byte) {
			p := filepath.Join(m.root, "gone")
			fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[:1<<20], 0)
			if err := syscall.Unlink(p); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[1<<20:2<<20], 1<<20)
			buf := make([]byte, 2<<20)
			if n, err := syscall.Pread(fd, buf, 0); err != nil || !bytes.Equal(buf[:n], data[:2<<20]) {
				t.Errorf("read back after the unlink: %d, %v", n, err)
			}
			syscall.Close(fd)
			return "gone", nil
		}},
		{name: "rename while open", run: func(t *testing.T, m *wptMount) (string, []byte) {
			a, b := filepath.Join(m.root, "a.tmp"), filepath.Join(m.root, "a")
			fd, err := syscall.Open(a, syscall.O_WRONLY|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[:1<<20], 0)
			if err := os.Rename(a, b); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, data[1<<20:], 1<<20)
			syscall.Close(fd)
			if _, ok := m.object(t, "a.tmp"); ok {
				t.Error("the old name is in the bucket")
			}
			return "a", data
		}},
		{name: "mtime moves", run: func(t *testing.T, m *wptMount) (string, []byte) {
			p := filepath.Join(m.root, "times")
			fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, fd, []byte("a"), 0)
			fi1, _ := os.Stat(p)
			time.Sleep(20 * time.Millisecond)
			mustWrite(t, fd, []byte("b"), 1)
			fi2, _ := os.Stat(p)
			if !fi2.ModTime().After(fi1.ModTime()) {
				t.Errorf("mtime %v after a write, was %v", fi2.ModTime(), fi1.ModTime())
			}
			syscall.Close(fd)
			return "times", []byte("ab")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mountWPT(t, PassthroughAuto)
			key, want := tc.run(t, m)
			got, ok := m.object(t, key)
			switch {
			case want == nil && ok:
				t.Errorf("%s is in the bucket (%d bytes), want none", key, len(got))
			case want != nil && !bytes.Equal(got, want):
				t.Errorf("%s: %d bytes in the bucket, want %d (first difference at %d)", key, len(got), len(want), firstDiffAt(got, want))
			}
			writes := m.count(t, "ferry_fuse_ops_total", "op", "write")
			if tc.viaFerry != (writes > 0) {
				t.Errorf("%v FUSE writes reached ferry (through ferry: %v)", writes, tc.viaFerry)
			}
		})
	}
}

// TestWritePassthroughAbort: when the session is aborted (umount -f)
// while a writer passes through to its staging file, ferry releases the
// file in the writer's place and uploads what was written until then;
// the writer's later writes fail (the staging file is made immutable)
// instead of landing where nothing uploads them, and its close reports
// the dead connection.
func TestWritePassthroughAbort(t *testing.T) {
	m := mountWPT(t, PassthroughAuto)
	fd, err := syscall.Open(filepath.Join(m.root, "w"), syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, fd, []byte("acknowledged"), 0)
	if err := syscall.Unmount(m.dir, syscall.MNT_FORCE); err != nil && !errors.Is(err, syscall.EBUSY) {
		t.Fatal(err)
	}
	waitDone(t, m.srv)
	if _, err := syscall.Pwrite(fd, []byte(" lost"), 12); !errors.Is(err, syscall.EPERM) {
		t.Errorf("write after the abort: %v, want EPERM", err)
	}
	if err := syscall.Close(fd); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("close after the abort: %v, want ENOTCONN", err)
	}
	if got, _ := m.object(t, "w"); string(got) != "acknowledged" {
		t.Errorf("w = %q, want the bytes written before the abort", got)
	}
	if w := m.count(t, "ferry_fuse_ops_total", "op", "write"); w != 0 {
		t.Errorf("%v FUSE writes reached ferry", w)
	}
}

func firstDiffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
