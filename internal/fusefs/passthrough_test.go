package fusefs

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// ptMount is a mount over one mem bucket with passthrough as opts say.
type ptMount struct {
	*readMount
	srv *Server
}

func mountPT(t *testing.T, opts Options, blockDir string) *ptMount {
	t.Helper()
	m := &readMount{st: mem.New(mem.Options{Bucket: "bkt"}), now: time.Now()}
	clock := func() time.Time {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.now
	}
	var srv *Server
	m.root, _, m.bc, srv = mountWith(t, m.st, meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Second, MaxEntries: 10000, Now: clock}, opts, blockDir)
	return &ptMount{readMount: m, srv: srv}
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off : off+n]
}

// directRead opens p and reads it whole with O_DIRECT, in 64 KiB reads:
// the kernel's page cache of the FUSE file cannot serve them, so every
// read reaches ferry unless the open is a passthrough one (then the
// backing file serves it). It returns the bytes and the descriptor's
// reads that reached ferry's cache.
func (m *ptMount) directRead(t *testing.T, p string) ([]byte, int64) {
	t.Helper()
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return m.readFD(t, fd)
}

func (m *ptMount) readFD(t *testing.T, fd int) ([]byte, int64) {
	t.Helper()
	before := m.reads()
	var out []byte
	buf := alignedBuf(64 << 10)
	for off := int64(0); ; {
		n, err := syscall.Pread(fd, buf, off)
		if err != nil {
			t.Fatalf("pread at %d: %v", off, err)
		}
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
	return out, m.reads() - before
}

// TestPassthroughRead: the first open of a file is served by ferry (it is
// not cached yet); once it is whole in the cache, an open is a
// passthrough one and no read reaches ferry; with --passthrough off they
// all do.
func TestPassthroughRead(t *testing.T) {
	for _, mode := range []string{PassthroughAuto, PassthroughOff} {
		t.Run(mode, func(t *testing.T) {
			m := mountPT(t, Options{Passthrough: mode}, filepath.Join(t.TempDir(), "blocks"))
			if on, why := m.srv.Passthrough(); on != (mode == PassthroughAuto) {
				t.Fatalf("Passthrough() = %v (%s)", on, why)
			}
			data := bytes.Repeat([]byte("passthrough....."), 3<<16) // 3 MiB
			m.put(t, "obj", data)
			p := filepath.Join(m.root, "obj")
			got, n := m.directRead(t, p)
			if !bytes.Equal(got, data) || n == 0 {
				t.Fatalf("first read: %d bytes (equal %v), %d reads reached ferry", len(got), bytes.Equal(got, data), n)
			}
			got, n = m.directRead(t, p)
			if !bytes.Equal(got, data) {
				t.Fatal("second read differs")
			}
			if want := mode == PassthroughOff; (n > 0) != want {
				t.Fatalf("second open: %d reads reached ferry (passthrough %s)", n, mode)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Size != int64(len(data)) {
				t.Fatalf("stat: %v, size %d", err, st.Size)
			}
		})
	}
}

// TestPassthroughBesideOtherOpens drives the kernel's rules for mixing
// opens of one inode: a writer beside a passthrough reader is served
// through ferry (direct), a reader opened after the write sees it, and
// the passthrough reader keeps the bytes it opened.
func TestPassthroughBesideOtherOpens(t *testing.T) {
	m := mountPT(t, Options{}, filepath.Join(t.TempDir(), "blocks"))
	if on, why := m.srv.Passthrough(); !on {
		t.Fatalf("passthrough unavailable: %s", why)
	}
	v1 := bytes.Repeat([]byte("version one....."), 64<<10) // 1 MiB
	m.put(t, "f", v1)
	info, err := m.st.Stat(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(m.root, "f")
	if got, _ := m.directRead(t, p); !bytes.Equal(got, v1) { // caches it whole
		t.Fatal("first read differs")
	}
	rd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(rd)
	if got, n := m.readFD(t, rd); !bytes.Equal(got, v1) || n != 0 {
		t.Fatalf("passthrough reader: equal %v, %d reads reached ferry", bytes.Equal(got, v1), n)
	}

	// A writer beside it: served by ferry, staged as usual.
	wr, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open for writing beside a passthrough reader: %v", err)
	}
	if _, err := wr.WriteAt([]byte("REWRITTEN"), 0); err != nil {
		t.Fatal(err)
	}
	// A new reader (opened after the write) sees it, through ferry.
	got, err := os.ReadFile(p)
	if err != nil || !bytes.HasPrefix(got, []byte("REWRITTEN")) {
		t.Fatalf("reader opened after the write: %v, %q", err, got[:min(len(got), 16)])
	}
	// The writer's writable shared mapping goes to its file, not to the
	// (read-only) cache file: the kernel retried its open on a new inode.
	mm, err := syscall.Mmap(int(wr.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("writable shared mmap beside a passthrough open: %v", err)
	}
	mm[1] = 'X'
	unix.Msync(mm, unix.MS_SYNC)
	syscall.Munmap(mm)
	if err := wr.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.HasPrefix(got, []byte("RXWRITTEN")) || len(got) != len(v1) {
		t.Fatalf("after the writer closed: %v, %q (%d bytes)", err, got[:min(len(got), 16)], len(got))
	}
	// The passthrough reader reads the bytes it opened (a snapshot).
	if got, _ := m.readFD(t, rd); !bytes.Equal(got, v1) {
		t.Fatalf("passthrough reader after a write: %q", got[:16])
	}
	// The cache file still holds version one, intact.
	r := m.bc.Open(block.Ref{Store: m.st, StoreID: "s3/bkt", Key: "f", Version: info.Version, Size: info.Size})
	defer r.Close()
	bf, _, _, ok := r.Backing(false)
	if !ok {
		t.Fatal("version one is no longer whole in the cache")
	}
	defer bf.Close()
	if b, err := io.ReadAll(bf); err != nil || !bytes.Equal(b, v1) {
		t.Fatalf("the cache file was changed through the mount: %v", err)
	}
}

// TestPassthroughNewVersion: an open of a newer version while a
// passthrough open of the old one is held is served by ferry (it must not
// read the old backing file), and reads the new bytes.
func TestPassthroughNewVersion(t *testing.T) {
	m := mountPT(t, Options{}, filepath.Join(t.TempDir(), "blocks"))
	v1 := bytes.Repeat([]byte("version one....."), 64<<10)
	v2 := bytes.Repeat([]byte("VERSION TWO!...."), 64<<10)
	m.put(t, "f", v1)
	p := filepath.Join(m.root, "f")
	m.directRead(t, p)
	rd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(rd)
	if _, n := m.readFD(t, rd); n != 0 {
		t.Fatalf("%d reads of a passthrough open reached ferry", n)
	}
	m.put(t, "f", v2)
	m.advance(2 * time.Minute) // the open revalidates
	got, n := m.directRead(t, p)
	if !bytes.Equal(got, v2) || n == 0 {
		t.Fatalf("new version: equal %v, %d reads reached ferry", bytes.Equal(got, v2), n)
	}
}

// TestPassthroughStackedCacheDir: a cache dir on overlayfs (a
// container's /tmp) backs passthrough opens; on overlayfs over overlayfs
// the kernel refuses it: auto falls back, on fails the mount.
func TestPassthroughStackedCacheDir(t *testing.T) {
	base := t.TempDir()
	ov1 := overlay(t, base, "one", "")
	ov2 := overlay(t, base, "two", ov1)
	tests := []struct {
		name, dir, mode string
		on, mountErr    bool
	}{
		{name: "overlayfs", dir: ov1, mode: PassthroughOn, on: true},
		{name: "overlayfs on overlayfs, auto", dir: ov2, mode: PassthroughAuto},
		{name: "overlayfs on overlayfs, on", dir: ov2, mode: PassthroughOn, mountErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.mountErr {
				err := mountErr(t, Options{Passthrough: tt.mode, BackingDir: tt.dir})
				if err == nil || !strings.Contains(err.Error(), "passthrough") {
					t.Fatalf("mount with --passthrough on: %v", err)
				}
				return
			}
			blocks := filepath.Join(tt.dir, "blocks-"+strings.ReplaceAll(tt.name, " ", "_"))
			m := mountPT(t, Options{Passthrough: tt.mode}, blocks)
			on, why := m.srv.Passthrough()
			if on != tt.on {
				t.Fatalf("Passthrough() = %v (%s)", on, why)
			}
			data := bytes.Repeat([]byte("stacked........."), 64<<10)
			m.put(t, "obj", data)
			p := filepath.Join(m.root, "obj")
			m.directRead(t, p)
			got, n := m.directRead(t, p)
			if !bytes.Equal(got, data) || (n == 0) != tt.on {
				t.Fatalf("second read: equal %v, %d reads reached ferry", bytes.Equal(got, data), n)
			}
		})
	}
}

// mountErr returns the error of a mount with opts (it unmounts one that
// succeeds).
func mountErr(t *testing.T, opts Options) error {
	t.Helper()
	bc, err := block.New(block.Config{Dir: filepath.Join(t.TempDir(), "blocks"), MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	v := vfs.New(vfs.Options{}, vfs.Deps{Blocks: bc})
	defer v.Close()
	dir := t.TempDir()
	srv, err := Mount(dir, v, opts)
	if err == nil {
		srv.Unmount()
	}
	return err
}

// overlay mounts an overlayfs at base/name (lower: a new directory, or
// lower when given) and unmounts it at the test's end.
func overlay(t *testing.T, base, name, lower string) string {
	t.Helper()
	d := filepath.Join(base, name)
	for _, s := range []string{"lower", "upper", "work", "mnt"} {
		if err := os.MkdirAll(filepath.Join(d, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if lower == "" {
		lower = filepath.Join(d, "lower")
	}
	mnt := filepath.Join(d, "mnt")
	opts := "lowerdir=" + lower + ",upperdir=" + filepath.Join(d, "upper") + ",workdir=" + filepath.Join(d, "work")
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount overlay: %v: %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	return mnt
}
