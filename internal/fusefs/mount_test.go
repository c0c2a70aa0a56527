package fusefs

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// mountMem mounts a vfs over one mem bucket (s3/bkt) and returns the
// bucket's directory on the mount.
func mountMem(t *testing.T) string {
	root, _, _ := mountStore(t, mem.New(mem.Options{Bucket: "bkt"}),
		meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Second, MaxEntries: 10000})
	return root
}

// mountStore mounts a vfs over st as s3/bkt with the meta cache of mcfg
// and returns the bucket's directory on the mount, the writeback manager
// and the block cache; all are closed and unmounted at the test's end.
func mountStore(t *testing.T, st objstore.Store, mcfg meta.Config) (string, *writeback.Manager, *block.Cache) {
	t.Helper()
	root, wb, bc, _ := mountWith(t, st, mcfg, Options{}, filepath.Join(t.TempDir(), "blocks"))
	return root, wb, bc
}

// mountWith is mountStore with mount options opts and the block cache in
// blockDir; it also returns the server.
func mountWith(t *testing.T, st objstore.Store, mcfg meta.Config, opts Options, blockDir string) (string, *writeback.Manager, *block.Cache, *Server) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse: %v", err)
	}
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	wb, err := writeback.New(context.Background(), writeback.Config{Dir: filepath.Join(t.TempDir(), "wb"), MinFreeBytes: -1, ExternalWrites: true, Logger: log}, resolve)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := meta.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := block.New(block.Config{Dir: blockDir, MaxBytes: 64 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	v := vfs.New(vfs.Options{}, vfs.Deps{Resolve: resolve, Writeback: wb, Blocks: bc, Meta: mc, Logger: log})
	dir := t.TempDir()
	if opts.BackingDir == "" {
		opts.BackingDir = blockDir
	}
	srv, err := Mount(dir, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		srv.Wait()
		v.Close()
		wb.Close()
		bc.Close()
		mc.Close()
	})
	return filepath.Join(dir, "s3", "bkt"), wb, bc, srv
}

// TestNodes drives the kernel through the FUSE nodes: one inode per name,
// descriptors that survive a rename and an unlink, fsync of a directory.
func TestNodes(t *testing.T) {
	root := mountMem(t)
	p := func(s string) string { return filepath.Join(root, s) }
	data := bytes.Repeat([]byte("0123456789abcdef"), 16<<10)

	fd, err := syscall.Open(p("f"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Pwrite(fd, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkdir(p("f"), 0o755); err != syscall.EEXIST {
		t.Fatalf("mkdir over a file: %v", err)
	}
	var st, fst syscall.Stat_t
	if err := syscall.Stat(p("f"), &st); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fstat(fd, &fst); err != nil {
		t.Fatal(err)
	}
	if st.Ino != fst.Ino || st.Size != int64(len(data)) {
		t.Errorf("path: inode %d size %d; descriptor: inode %d size %d", st.Ino, st.Size, fst.Ino, fst.Size)
	}
	if err := syscall.Rename(p("f"), p("g")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(p("g"), &st); err != nil || st.Ino != fst.Ino {
		t.Errorf("after rename: %v, inode %d, want %d", err, st.Ino, fst.Ino)
	}
	if err := syscall.Unlink(p("g")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if n, err := syscall.Pread(fd, buf, 200<<10); err != nil || !bytes.Equal(buf[:n], data[200<<10:200<<10+1000]) {
		t.Errorf("read after rename and unlink: %d bytes, %v", n, err)
	}
	if err := syscall.Fstat(fd, &fst); err != nil || fst.Size != int64(len(data)) {
		t.Errorf("fstat after unlink: size %d, %v", fst.Size, err)
	}
	d, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Errorf("fsync of a directory: %v", err)
	}
}

// TestBdiPath decodes Linux dev_t numbers as glibc's major()/minor() do.
func TestBdiPath(t *testing.T) {
	for _, tc := range []struct {
		dev  uint64
		want string
	}{
		{0x35, "/sys/class/bdi/0:53/read_ahead_kb"},                 // 0:53, a FUSE mount
		{0x10303, "/sys/class/bdi/259:3/read_ahead_kb"},             // 259:3 (8-bit minor)
		{0x11112c70, "/sys/class/bdi/300:70000/read_ahead_kb"},      // 20-bit minor
		{0x100011138870, "/sys/class/bdi/5000:70000/read_ahead_kb"}, // major above 4095
	} {
		if got := bdiPath(tc.dev); got != tc.want {
			t.Errorf("bdiPath(%#x) = %s, want %s", tc.dev, got, tc.want)
		}
	}
}
