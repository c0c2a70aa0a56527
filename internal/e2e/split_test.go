package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSplitNameStat: a second writer of a file whose first writer passes
// through to its staging file gets a node of its own (fusefs's split), so
// the name and the first writer's descriptor are two inodes for the
// kernel. A size change through either must show at once through the
// other (stat of the name, fstat of the descriptor): the model test found
// a truncate through the old descriptor that a stat of the name did not
// see, after a readdir had let the kernel cache the name's attributes;
// and an append through the second writer after a truncate through the
// first landed at the second node's old size, past a hole (the soak model).
func TestSplitNameStat(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	mp := startMount(t, e, e.srv.Endpoint, append(mountModeFlags(modeCold), "--write-passthrough", "on")...)
	defer mp.stop(t)
	dir := e.path("split")
	if err := syscall.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "f")
	w1, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(w1)
	buf := make([]byte, 12<<10)
	if _, err := syscall.Pwrite(w1, buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fsync(w1); err != nil { // uploaded: the next writer cannot share the staging file
		t.Fatal(err)
	}
	if _, err := syscall.Pwrite(w1, buf, 20<<10); err != nil {
		t.Fatal(err)
	}
	w2, err := syscall.Open(p, syscall.O_RDWR|syscall.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	var a, b syscall.Stat_t
	if err := syscall.Fstat(w1, &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(p, &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino == b.Ino {
		t.Fatalf("the second writer did not get a node of its own (inode %d for both): the test checks nothing", a.Ino)
	}
	stats := func() (d, n, s syscall.Stat_t) {
		t.Helper()
		if err := syscall.Fstat(w1, &d); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fstat(w2, &n); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(p, &s); err != nil {
			t.Fatal(err)
		}
		return d, n, s
	}
	sizes := func(step string, want int64) {
		t.Helper()
		d, n, s := stats()
		if d.Size != want || n.Size != want || s.Size != want {
			t.Errorf("after %s: fstat of the first writer %d, of the second %d, stat of the name %d; want %d", step, d.Size, n.Size, s.Size, want)
		}
	}
	steps := []struct {
		name string
		do   func() error
		want int64
	}{
		{"ftruncate of the first writer", func() error { return syscall.Ftruncate(w1, 513) }, 513},
		{"ftruncate of the second writer", func() error { return syscall.Ftruncate(w2, 70000) }, 70000},
		{"truncate of the name", func() error { return syscall.Truncate(p, 4096) }, 4096},
		{"append of the second writer", func() error { _, err := syscall.Write(w2, buf); return err }, 4096 + 12<<10},
		{"ftruncate of the first writer again", func() error { return syscall.Ftruncate(w1, 1) }, 1},
		{"truncate of the name, longer", func() error { return syscall.Truncate(p, 9000) }, 9000},
		// Right after the truncate through the first writer, the kernel's
		// size of the second writer's node still says 9000: the append
		// lands at the end all the same, no hole.
		{"ftruncate of the first writer, shorter, then an append of the second", func() error {
			if err := syscall.Ftruncate(w1, 100); err != nil {
				return err
			}
			_, err := syscall.Write(w2, []byte("tail!"))
			return err
		}, 105},
	}
	for _, s := range steps {
		if _, err := os.ReadDir(dir); err != nil { // readdirplus: the kernel may keep its attributes a jiffy
			t.Fatal(err)
		}
		stats() // fills every attribute cache the kernel keeps
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		sizes(s.name, s.want)
	}
	syscall.Close(w2)
	got, err := os.ReadFile(p)
	if err != nil || len(got) != 105 || string(got[100:]) != "tail!" {
		t.Fatalf("the file after the appends: %d bytes ending %q, %v; want 105 ending \"tail!\"", len(got), got[max(0, len(got)-5):], err)
	}
}
