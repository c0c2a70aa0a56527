package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The tests of this file pin down, one by one, POSIX behaviours the model
// test (model_test.go) found broken, so that each has a small, clear
// reproduction. They drive a "ferry mount" from this process.

// mountedRoot starts ferry mount for e and returns a fresh directory on it.
func mountedRoot(t *testing.T, e *s3env) string {
	t.Helper()
	startMount(t, e, e.srv.Endpoint)
	root := e.path("p")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestInodeIdentity: a name keeps its inode while it exists. A failed
// mkdir, symlink or O_EXCL create on an existing name makes the kernel
// look the name up again; the answer must be the same inode, or an open
// descriptor and the path see two different files (stale size, short
// reads, a rename that loses the node).
func TestInodeIdentity(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	root := mountedRoot(t, e)
	p := func(s string) string { return filepath.Join(root, s) }

	t.Run("size-after-failed-mkdir", func(t *testing.T) {
		fd, err := syscall.Open(p("c"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		syscall.Write(fd, make([]byte, 10))
		if err := syscall.Mkdir(p("c"), 0o755); err != syscall.EEXIST {
			t.Fatalf("mkdir on a file: %v, want EEXIST", err)
		}
		syscall.Write(fd, make([]byte, 10))
		var fst, st syscall.Stat_t
		syscall.Fstat(fd, &fst)
		if err := syscall.Stat(p("c"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != fst.Ino || st.Size != 20 {
			t.Errorf("after a failed mkdir: the path is inode %d size %d, the open descriptor inode %d size %d (want one inode, size 20)", st.Ino, st.Size, fst.Ino, fst.Size)
		}
	})
	t.Run("read-after-failed-excl-and-rename", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 8<<10)
		fd, err := syscall.Open(p("x"), syscall.O_RDWR|syscall.O_CREAT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		syscall.Pwrite(fd, data, 0)
		if _, err := syscall.Open(p("x"), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644); err != syscall.EEXIST {
			t.Fatalf("O_EXCL on an existing file: %v, want EEXIST", err)
		}
		if err := syscall.Rename(p("x"), p("y")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1000)
		n, err := syscall.Pread(fd, buf, 50<<10)
		if err != nil || !bytes.Equal(buf[:max(n, 0)], data[50<<10:50<<10+1000]) {
			t.Errorf("read through the descriptor after a failed O_EXCL create and a rename: n=%d err=%v", n, err)
		}
	})
	t.Run("rename-to-itself-then-away", func(t *testing.T) {
		if err := os.WriteFile(p("f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Rename(p("f"), p("f")); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Rename(p("f"), p("g")); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p("g")); err != nil || string(b) != "x" {
			t.Errorf("after rename(f, f) and rename(f, g), g reads %q, %v", b, err)
		}
	})
}

// TestFsyncDir: fsync on a directory descriptor (what git, SQLite and
// atomic-write helpers do after a rename) succeeds.
func TestFsyncDir(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	root := mountedRoot(t, e)
	if err := os.WriteFile(filepath.Join(root, "f.tmp"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "f.tmp"), filepath.Join(root, "f")); err != nil {
		t.Fatal(err)
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

// TestRenameLeavesNoGhost: once rename(2) returned, the old name is gone
// for the task, even while the file's upload under the new name is still
// pending: the old directory can be removed, and lists nothing.
func TestRenameLeavesNoGhost(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	root := mountedRoot(t, e)
	p := func(s string) string { return filepath.Join(root, s) }
	if err := os.Mkdir(p("a"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A file made durable once, then changed through an open descriptor:
	// its new content is staged over the uploaded object (its base).
	f, err := os.Create(p("a/d"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(bytes.Repeat([]byte("x"), 300<<10))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("changed"), 1000)
	if err := os.Rename(p("a/d"), p("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p("a/d")); !os.IsNotExist(err) {
		t.Errorf("lstat of the old name after the rename: %v, want ENOENT", err)
	}
	if ents, err := os.ReadDir(p("a")); err != nil || len(ents) != 0 {
		t.Errorf("the old directory lists %v (%v), want nothing", ents, err)
	}
	if err := syscall.Rmdir(p("a")); err != nil {
		t.Errorf("rmdir of the emptied directory: %v", err)
	}
}

// TestOpenUnlinked: an open file stays usable after unlink (POSIX): a
// read past what the kernel has cached still returns the file's bytes
// (not EOF, not ENOENT), writes work, and the name does not come back
// when the file is closed.
func TestOpenUnlinked(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	root := mountedRoot(t, e)
	data := randBytes(t, 3<<20)
	for _, tc := range []struct {
		name    string
		flags   int
		durable bool // fsync before close: the file is a clean object
	}{
		{name: "rdonly-durable", flags: os.O_RDONLY, durable: true},
		{name: "rdwr-durable", flags: os.O_RDWR, durable: true},
		{name: "rdonly-staged", flags: os.O_RDONLY},
		{name: "rdwr-staged", flags: os.O_RDWR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(root, tc.name)
			w, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(data)
			if tc.durable {
				if err := w.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			f, err := os.OpenFile(p, tc.flags, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1000)
			off := int64(2 << 20)
			n, err := f.ReadAt(buf, off)
			if n != len(buf) || !bytes.Equal(buf, data[off:off+1000]) {
				t.Errorf("read at %d after unlink: %d bytes, %v (want the file's 1000 bytes)", off, n, err)
			}
			if tc.flags&os.O_RDWR != 0 {
				if _, err := f.WriteAt([]byte("after unlink"), 10); err != nil {
					t.Errorf("write after unlink: %v", err)
				}
			}
			if err := f.Close(); err != nil {
				t.Errorf("close after unlink: %v", err)
			}
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("the unlinked name is back after close: %v", err)
			}
		})
	}
}
