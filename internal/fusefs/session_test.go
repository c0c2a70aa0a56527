package fusefs

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// testMount is a mount made by mountFull.
type testMount struct {
	dir string // the mount point
	srv *Server
	wb  *writeback.Manager
}

// mountFull mounts st as mountStore does and returns the mount point, the
// server and the writeback manager.
func mountFull(t *testing.T, st objstore.Store, mcfg meta.Config) testMount {
	t.Helper()
	root, wb, _, srv := mountWith(t, st, mcfg, Options{}, filepath.Join(t.TempDir(), "blocks"))
	return testMount{dir: filepath.Dir(filepath.Dir(root)), srv: srv, wb: wb}
}

// waitDone waits for the end of the session.
func waitDone(t *testing.T, srv *Server) {
	t.Helper()
	select {
	case <-srv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session did not end within 30 s")
	}
}

// drained drains the write-back and returns the object key's bytes.
func drained(t *testing.T, m testMount, st objstore.Store, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.wb.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	r, err := st.NewReader(ctx, key, 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFd(t *testing.T, fd int, s string) {
	t.Helper()
	if _, err := syscall.Write(fd, []byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// TestSessionEnd ends the session from outside the way users do and checks
// that Done is closed and no written byte is lost.
func TestSessionEnd(t *testing.T) {
	mcfg := meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Second, MaxEntries: 1000}
	t.Run("unmount", func(t *testing.T) {
		st := mem.New(mem.Options{Bucket: "bkt"})
		m := mountFull(t, st, mcfg)
		if err := os.WriteFile(filepath.Join(m.dir, "s3/bkt/f"), []byte("closed"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Unmount(m.dir, 0); err != nil {
			t.Fatal(err)
		}
		waitDone(t, m.srv)
		if o := m.srv.Orphans(); len(o) != 0 {
			t.Errorf("orphans after a clean unmount: %v", o)
		}
		if got := drained(t, m, st, "f"); got != "closed" {
			t.Errorf("f = %q", got)
		}
		// Something else mounted on the directory since is not ours to
		// unmount.
		if err := syscall.Mount("tmpfs", m.dir, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		defer syscall.Unmount(m.dir, syscall.MNT_DETACH)
		if err := m.srv.Unmount(); err != nil {
			t.Fatalf("Unmount after the session ended: %v", err)
		}
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(m.dir, &sfs); err != nil || sfs.Type != 0x01021994 { // TMPFS_MAGIC
			t.Errorf("the tmpfs mounted on the directory since is gone (statfs type %#x, %v)", sfs.Type, err)
		}
	})
	t.Run("lazy unmount with a file open", func(t *testing.T) {
		st := mem.New(mem.Options{Bucket: "bkt"})
		m := mountFull(t, st, mcfg)
		fd, err := syscall.Open(filepath.Join(m.dir, "s3/bkt/lazy"), syscall.O_WRONLY|syscall.O_CREAT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		writeFd(t, fd, "before ")
		if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		// The open file keeps the session alive and working.
		writeFd(t, fd, "after")
		select {
		case <-m.srv.Done():
			t.Fatal("the session ended while a file was open on the detached mount")
		default:
		}
		if err := syscall.Close(fd); err != nil {
			t.Fatalf("close: %v", err)
		}
		waitDone(t, m.srv)
		if got := drained(t, m, st, "lazy"); got != "before after" {
			t.Errorf("lazy = %q, want %q", got, "before after")
		}
	})
	t.Run("abort with a writer", func(t *testing.T) {
		st := mem.New(mem.Options{Bucket: "bkt"})
		m := mountFull(t, st, mcfg)
		fd, err := syscall.Open(filepath.Join(m.dir, "s3/bkt/w"), syscall.O_WRONLY|syscall.O_CREAT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		writeFd(t, fd, "acknowledged")
		// umount -f: the kernel aborts the connection, then refuses the
		// unmount itself while the file is open.
		if err := syscall.Unmount(m.dir, syscall.MNT_FORCE); err != nil && !errors.Is(err, syscall.EBUSY) {
			t.Fatal(err)
		}
		waitDone(t, m.srv)
		if _, err := syscall.Write(fd, []byte("lost")); !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("write after the abort: %v, want ENOTCONN", err)
		}
		o := m.srv.Orphans()
		if len(o) != 1 || o[0].Path != "s3/bkt/w" || o[0].Err != nil {
			t.Errorf("orphans = %+v, want s3/bkt/w", o)
		}
		if got := drained(t, m, st, "w"); got != "acknowledged" {
			t.Errorf("w = %q, want the acknowledged bytes", got)
		}
	})
}

func TestMountinfoHas(t *testing.T) {
	info := `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
36 35 0:45 / /tmp/a\040b rw,nosuid,nodev,relatime - fuse.ferry ferry rw,user_id=0,group_id=0
37 35 0:46 / /fusion rw,nosuid,nodev,relatime - fuse.ferry ferry rw,user_id=0,group_id=0
38 37 0:47 / /fusion rw,relatime - tmpfs tmpfs rw
`
	for _, tc := range []struct {
		dir, dev string
		want     bool
	}{
		{"/tmp/a b", "0:45", true},
		{"/tmp/a b/", "0:45", true},
		{"/fusion", "0:46", true}, // still attached, under another mount
		{"/fusion", "0:48", false},
		{"/tmp/a", "0:45", false},
		{"/proc", "0:45", false},
	} {
		got, err := mountinfoHas(bufio.NewScanner(strings.NewReader(info)), tc.dir, tc.dev)
		if err != nil || got != tc.want {
			t.Errorf("mountinfoHas(%q, %s) = %v, %v; want %v", tc.dir, tc.dev, got, err, tc.want)
		}
	}
	if got := unescapeMountinfo(`a\011b\134c\012`); got != "a\tb\\c\n" {
		t.Errorf("unescape = %q", got)
	}
}
