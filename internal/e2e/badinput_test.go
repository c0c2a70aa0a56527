package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// within runs fn and fails the test when it takes over d (a hang).
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { // owner: within, which waits for it or fails
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s hung for over %v", what, d)
	}
}

// TestBadInputAwkwardKeys puts keys that are awkward as paths in the
// bucket with the store API, then lists and reads them through a mount:
// nothing crashes or hangs, keys that cannot be paths are skipped (and
// logged), the rest read back byte-exact; then it creates such names
// through the mount. A backend that refuses a key at Put (MinIO refuses
// some) is logged and checked on the others.
func TestBadInputAwkwardKeys(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testBadInputAwkwardKeys)
}

func testBadInputAwkwardKeys(t *testing.T, e *s3env) {
	seg200 := strings.Repeat("s", 200)
	long1024 := "k/" + strings.Join([]string{seg200, seg200, seg200, seg200}, "/") + "/" // 806 bytes
	long1024 += strings.Repeat("t", 1024-len(long1024))
	type keyCase struct {
		key  string
		path string // the name under the mount ("" when the key cannot be a path)
	}
	var tests []keyCase
	if e.scheme != "s3" {
		// "k/a" beside "k/a/b": the directory wins. MinIO stores both
		// but lists only the object, so there "k/a" is a plain file.
		tests = append(tests, keyCase{key: "k/a", path: "k/a/"}, keyCase{key: "k/a/b", path: "k/a/b"})
	}
	tests = append(tests, []keyCase{
		{key: "k/d//b", path: ""},
		{key: "k/./x", path: ""},
		{key: "k/../x", path: ""},
		{key: "k/" + strings.Repeat("n", 255), path: "k/" + strings.Repeat("n", 255)},
		{key: "k/" + strings.Repeat("m", 256), path: ""},
		{key: long1024, path: long1024},
		{key: "k/bad\xff\xfe", path: ""}, // refused by every backend (keys are UTF-8)
		{key: "k/é€", path: "k/é€"},
		{key: "k/new\nline", path: "k/new\nline"},
		{key: "k/100%done", path: "k/100%done"},
		{key: "k/%2F%00", path: "k/%2F%00"},
		{key: "k/plain", path: "k/plain"},
	}...)
	stored := map[string][]byte{}
	for i, tt := range tests {
		data := []byte(fmt.Sprintf("object %d %q\n", i, tt.key))
		_, err := e.store.Put(context.Background(), tt.key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
		if err != nil {
			t.Logf("%s refuses key %q: %v", e.scheme, tt.key, err)
			continue
		}
		stored[tt.key] = data
	}
	if _, ok := stored["k/plain"]; !ok {
		t.Fatal("even a plain key could not be stored")
	}
	m := startMount(t, e, e.srv.Endpoint)
	within(t, 60*time.Second, "walking the mount", func() {
		err := filepath.WalkDir(e.path("k"), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk %q: %v", p, err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("walk: %v", err)
		}
	})
	ents, err := os.ReadDir(e.path("k"))
	if err != nil {
		t.Fatalf("readdir k: %v", err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	for _, tt := range tests {
		data, ok := stored[tt.key]
		if !ok {
			continue
		}
		if strings.HasSuffix(tt.path, "/") { // shadowed by a directory
			if fi, err := os.Stat(e.path(tt.path)); err != nil || !fi.IsDir() {
				t.Errorf("%q beside keys below it: %v, %v; want a directory", tt.key, fi, err)
			}
			continue
		}
		if tt.path == "" {
			rest := strings.TrimPrefix(tt.key, "k/")
			for _, n := range names {
				if n == rest || n == "" || n == "." || n == ".." || len(n) > 255 {
					t.Errorf("listing shows %q (key %q cannot be a path)", n, tt.key)
				}
			}
			continue
		}
		var got []byte
		var err error
		within(t, 30*time.Second, "reading "+tt.path, func() { got, err = os.ReadFile(e.path(tt.path)) })
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("read %q: %q, %v; want %q", tt.path, got, err, data)
		}
	}
	// Names created through the mount.
	creates := []struct {
		name string
		want syscall.Errno // 0: works and lands in the bucket
	}{
		{name: strings.Repeat("c", 255)},
		{name: strings.Repeat("c", 256), want: syscall.ENAMETOOLONG},
		{name: "new\nline"},
		{name: "50%"},
		{name: "odd\xff", want: syscall.EILSEQ}, // keys are UTF-8 everywhere
		{name: "é€"},
	}
	for _, c := range creates {
		p := filepath.Join(e.path("made"), c.name)
		_ = os.MkdirAll(e.path("made"), 0o755)
		var err error
		within(t, 30*time.Second, "creating "+c.name, func() { err = os.WriteFile(p, []byte("made "+c.name), 0o644) })
		switch {
		case c.want != 0 && errnoOf(err) != c.want:
			t.Errorf("create %q: %v, want %v", c.name, err, c.want)
		case c.want == 0 && err != nil:
			// A backend may refuse a name: then a clear errno, never EIO.
			if errnoOf(err) == syscall.EIO {
				t.Errorf("create %q: %v, want success or a clear errno", c.name, err)
			}
		}
	}
	code, log := m.term(t, 2*time.Minute)
	if code != 0 {
		t.Fatalf("ferry mount exited %d:\n%s", code, tailStr(log, 6000))
	}
	for _, c := range creates {
		if c.want != 0 {
			continue
		}
		got, err := e.get("made/" + c.name)
		if err != nil || string(got) != "made "+c.name {
			t.Errorf("made/%q in the bucket: %q, %v", c.name, got, err)
		}
	}
	for _, tt := range tests {
		skipped := oddPrefix(tt.key)
		if _, ok := stored[tt.key]; ok && tt.path == "" && !strings.Contains(log, "key="+skipped) && !strings.Contains(log, "key="+strconv.Quote(skipped)) {
			t.Errorf("no log line names the skipped key %q", tt.key)
		}
	}
	if strings.Contains(log, "panic") {
		t.Errorf("ferry panicked:\n%s", tailStr(log, 6000))
	}
}

// TestBadInputNoSuchBucket checks a bucket that does not exist: listing it
// and writing there are ENOENT, promptly (not EIO, not a hang).
func TestBadInputNoSuchBucket(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	m := startMount(t, e, e.srv.Endpoint)
	nosuch := filepath.Join(e.mnt, "s3", "nosuch-"+e.bucket)
	within(t, 60*time.Second, "ls of a missing bucket", func() {
		if _, err := os.ReadDir(nosuch); errnoOf(err) != syscall.ENOENT {
			t.Errorf("readdir %s: %v, want ENOENT", nosuch, err)
		}
	})
	within(t, 60*time.Second, "write into a missing bucket", func() {
		if err := os.WriteFile(filepath.Join(nosuch, "x"), []byte("x"), 0o644); errnoOf(err) != syscall.ENOENT {
			t.Errorf("write into %s: %v, want ENOENT", nosuch, err)
		}
		if err := os.Mkdir(filepath.Join(nosuch, "d"), 0o755); errnoOf(err) != syscall.ENOENT {
			t.Errorf("mkdir in %s: %v, want ENOENT", nosuch, err)
		}
	})
	if code, log := m.term(t, time.Minute); code != 0 {
		t.Errorf("ferry mount exited %d:\n%s", code, tailStr(log, 4000))
	}
}

// TestBadInputUnwritableCache checks that a cache directory that cannot be
// written makes "ferry run" exit 1 at start with a clear message, before
// the task runs.
func TestBadInputUnwritableCache(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", ro, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
		t.Fatalf("mount read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(ro, syscall.MNT_DETACH) })
	for _, dir := range []string{ro, filepath.Join(ro, "sub")} {
		r := e.ferry(time.Minute, "run", "--mount-point", e.mnt, "--cache-dir", dir, "--", "sh", "-c", "echo task-ran")
		if r.code != 1 || strings.Contains(r.stdout, "task-ran") {
			t.Errorf("cache %s: exit %d, stdout %q; want 1 before the task", dir, r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, dir) || !strings.Contains(strings.ToLower(r.stderr), "read-only") {
			t.Errorf("cache %s: no clear message (path and cause):\n%s", dir, r.stderr)
		}
	}
}

// readFull reads len(b) bytes at off from f (short at EOF).
func readFull(f *os.File, b []byte, off int64) (int, error) {
	n, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// oddPrefix returns what a listing of key's directories meets first that
// cannot be a path: the key itself when its last component is bad, else
// the common prefix ending in the first bad component.
func oddPrefix(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		if seg == "" || seg == "." || seg == ".." || len(seg) > 255 || !utf8.ValidString(seg) {
			if i == len(segs)-1 {
				return key
			}
			return strings.Join(segs[:i+1], "/") + "/"
		}
	}
	return key
}

// TestBadInputChangedUnderReader deletes, then overwrites, an object
// while a descriptor reads it: every byte read is the old version's, and
// once the old version is gone reads fail with EIO or ESTALE (never the
// new version's bytes, never a short file).
func TestBadInputChangedUnderReader(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	const size = 48 << 20
	m := startMount(t, e, e.srv.Endpoint)
	for _, change := range []string{"delete", "overwrite"} {
		key := "changed/" + change
		old := randBytes(t, size)
		e.put(key, old)
		f, err := os.Open(e.path(key))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		if n, err := readFull(f, buf, 0); err != nil || !bytes.Equal(buf[:n], old[:n]) {
			t.Fatalf("%s: first read: %d, %v", change, n, err)
		}
		if change == "delete" {
			if err := e.store.Delete(context.Background(), key, objstore.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		} else {
			e.put(key, randBytes(t, size))
		}
		var good, failed int64
		within(t, 2*time.Minute, change+" reader", func() {
			for off := int64(len(buf)); off < size; off += int64(len(buf)) {
				n, err := readFull(f, buf, off)
				if err != nil {
					if n := errnoOf(err); n != syscall.EIO && n != syscall.ESTALE {
						t.Errorf("%s: read at %d: %v, want EIO or ESTALE", change, off, err)
					}
					failed = off
					return
				}
				want := old[off:min(off+int64(len(buf)), size)]
				if !bytes.Equal(buf[:n], want) {
					t.Errorf("%s: read at %d: %d bytes not the old version's (want %d)", change, off, n, len(want))
					return
				}
				good += int64(n)
			}
		})
		f.Close()
		t.Logf("%s: %d bytes of the old version read after the change, error at %d", change, good, failed)
	}
	if code, log := m.term(t, time.Minute); code != 0 {
		t.Errorf("ferry mount exited %d:\n%s", code, tailStr(log, 4000))
	}
}
