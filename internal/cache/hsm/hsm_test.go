package hsm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pattern is the test content at off.
func pattern(off int64, b []byte) {
	for i := range b {
		b[i] = byte((off + int64(i)) * 7 % 251)
	}
}

// fakeFiller fills a file with pattern through an ordinary descriptor
// (which raises no events), or fails.
type fakeFiller struct {
	f    *os.File
	size int64
	fail error
	// block, when not nil, holds every Fill until it is closed.
	block chan struct{}

	mu     sync.Mutex // guards filled and calls
	filled map[int64]bool
	calls  int
}

func (ff *fakeFiller) Ready(off, n int64, pid int32) bool {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	for p := off &^ 4095; p < min(off+n, ff.size); p += 4096 {
		if !ff.filled[p] {
			return false
		}
	}
	return true
}

func (ff *fakeFiller) Fill(ctx context.Context, off, n int64, pid int32) error {
	ff.mu.Lock()
	ff.calls++
	ff.mu.Unlock()
	if ff.block != nil {
		select {
		case <-ff.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ff.fail != nil {
		return ff.fail
	}
	end := min(off+n, ff.size)
	b := make([]byte, end-off)
	pattern(off, b)
	if _, err := ff.f.WriteAt(b, off); err != nil {
		return err
	}
	ff.mu.Lock()
	for p := off &^ 4095; p < end; p += 4096 {
		ff.filled[p] = true
	}
	ff.mu.Unlock()
	return nil
}

// setup makes a sparse file of size bytes in a new cache dir, a Listener
// over the dir and a Watch of the file with a fakeFiller.
func setup(t *testing.T, size int64, opts ...func(*fakeFiller)) (*Listener, *fakeFiller, *Watch, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v (these tests need root and a cache dir on ext4, xfs or btrfs)", dir, err)
	}
	t.Cleanup(func() { l.Close() })
	f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	ff := &fakeFiller{f: f, size: size, filled: map[int64]bool{}}
	for _, o := range opts {
		o(ff) // before the Watch: the fill goroutines read these fields
	}
	w, err := l.Watch(f, ff)
	if err != nil {
		t.Fatal(err)
	}
	return l, ff, w, "data"
}

func TestReadsAreFilled(t *testing.T) {
	const size = 8 << 20
	l, ff, _, name := setup(t, size)
	rf, err := l.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	for _, tt := range []struct {
		name   string
		off, n int64
	}{
		{"first page", 0, 4096},
		{"unaligned", 5000, 100},
		{"large", 1 << 20, 2 << 20},
		{"tail", size - 10, 10},
		{"again", 0, 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]byte, tt.n)
			if _, err := rf.ReadAt(got, tt.off); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, tt.n)
			pattern(tt.off, want)
			if !bytes.Equal(got, want) {
				t.Fatalf("read [%d, +%d) differs from the filled bytes", tt.off, tt.n)
			}
		})
	}
	st := l.Stats()
	if st.Events == 0 || st.Filled == 0 || st.Ready == 0 || st.Denied != 0 {
		t.Fatalf("stats %+v: want events filled and answered ready, none denied", st)
	}
	ff.mu.Lock()
	calls := ff.calls
	ff.mu.Unlock()
	if calls == 0 {
		t.Fatal("the filler was never asked")
	}
}

func TestFailedFillIsEIO(t *testing.T) {
	l, _, _, name := setup(t, 1<<20, func(ff *fakeFiller) { ff.fail = errors.New("the store is down") })
	rf, err := l.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	_, err = rf.ReadAt(make([]byte, 4096), 8192)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a range whose fill failed: %v, want EIO", err)
	}
	if l.Stats().Denied != 1 {
		t.Fatalf("stats %+v: want one denied", l.Stats())
	}
}

func TestWholeEndsEvents(t *testing.T) {
	l, _, w, name := setup(t, 1<<20)
	rf, err := l.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	buf := make([]byte, 1<<20)
	if _, err := rf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Whole(); err != nil {
		t.Fatal(err)
	}
	before := l.Stats().Events
	for range 100 {
		if _, err := rf.ReadAt(buf[:4096], 4096); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Stats().Events - before; got != 0 {
		t.Fatalf("%d events after Whole, want 0", got)
	}
}

func TestEndedWatch(t *testing.T) {
	for _, tt := range []struct {
		name  string
		whole bool
		want  error
	}{
		{"partial: later reads fail", false, syscall.EIO},
		{"whole: later reads are allowed", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, _, w, name := setup(t, 1<<20)
			rf, err := l.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Close()
			w.Close(tt.whole)
			_, err = rf.ReadAt(make([]byte, 4096), 0)
			if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
				t.Fatalf("read after Close(%v): %v, want %v", tt.whole, err, tt.want)
			}
		})
	}
}

// TestUnavailable: file systems that refuse pre-content marks say so.
func TestUnavailable(t *testing.T) {
	ovl := t.TempDir()
	for _, d := range []string{"l", "u", "w", "m"} {
		os.Mkdir(filepath.Join(ovl, d), 0o700)
	}
	opts := "lowerdir=" + filepath.Join(ovl, "l") + ",upperdir=" + filepath.Join(ovl, "u") + ",workdir=" + filepath.Join(ovl, "w")
	if err := unix.Mount("overlay", filepath.Join(ovl, "m"), "overlay", 0, opts); err != nil {
		t.Fatalf("mount an overlayfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(ovl, "m"), unix.MNT_DETACH) })
	tmpfs := t.TempDir()
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tmpfs, unix.MNT_DETACH) })
	for _, tt := range []struct{ dir, want string }{
		{filepath.Join(ovl, "m"), "overlayfs"},
		{tmpfs, "tmpfs"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			l, err := Open(tt.dir, nil)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			var ue *UnavailableError
			if !errors.As(err, &ue) || !strings.Contains(ue.Reason, tt.want) {
				t.Fatalf("Open: %v, want an UnavailableError naming %s", err, tt.want)
			}
		})
	}
}

// TestCloseDeniesFills: a fill in progress when the Listener closes
// fails its read (EIO), it is not allowed.
func TestCloseDeniesFills(t *testing.T) {
	l, _, _, name := setup(t, 1<<20, func(ff *fakeFiller) { ff.block = make(chan struct{}) })
	rf, err := l.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	done := make(chan error, 1)
	go func() { // owner: this test
		_, err := rf.ReadAt(make([]byte, 4096), 0)
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); l.Stats().Events == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no event")
		}
		time.Sleep(time.Millisecond)
	}
	l.Close()
	if err := <-done; !errors.Is(err, syscall.EIO) {
		t.Fatalf("read pending at Close: %v, want EIO", err)
	}
}
