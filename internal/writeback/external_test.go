package writeback

import (
	"bytes"
	"os"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestBackingEligible: only a file whose staging file is its whole
// content, not reopened, is handed out for the kernel to write.
func TestBackingEligible(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env, m *Manager) *File
		write bool
		want  bool
	}{
		{name: "created", want: true, write: true, setup: func(t *testing.T, e *env, m *Manager) *File {
			f, err := m.Create(tgt("new"), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire()
			return f
		}},
		{name: "over an object", write: true, setup: func(t *testing.T, e *env, m *Manager) *File {
			e.putObject("old", []byte("hello world"))
			return openBase(t, e, m, "old")
		}},
		{name: "over an object, read-only", setup: func(t *testing.T, e *env, m *Manager) *File {
			e.putObject("old", []byte("hello world"))
			return openBase(t, e, m, "old")
		}},
		{name: "reopened before durable", write: true, setup: reopened},
		{name: "reopened, read-only", want: true, setup: reopened},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			g := e.gate(opKey(faulty.OpPut, "re"))
			e.setFaults(faulty.Config{Stall: g.stall})
			cfg := e.config()
			cfg.ExternalWrites = true
			cfg.MinFreeBytes = -1
			m := e.open(cfg)
			f := tc.setup(t, e, m)
			fd, key, ok := f.Backing(tc.write)
			if ok != tc.want {
				t.Fatalf("Backing(%v) ok = %v, want %v", tc.write, ok, tc.want)
			}
			if ok {
				fd.Close()
				if key == "" {
					t.Error("no key")
				}
				if tc.write {
					f.EndExternal()
				}
			}
			f.Release()
		})
	}
}

// reopened returns a file closed once, whose upload hangs (the test's
// gate), opened again.
func reopened(t *testing.T, e *env, m *Manager) *File {
	f := writeFile(t, m, "re", []byte("closed once"))
	f.Acquire()
	return f
}

// TestExternalWrites: bytes the kernel writes into the staging file are
// seen by Size and reads while the writer is open, and uploaded once it
// ends, also a last write made within the clock's resolution of a look.
func TestExternalWrites(t *testing.T) {
	e := newEnv(t)
	m, f, fd := openExternal(t, e, 0)
	data := pattern(3*testPart+100, 9)
	if _, err := fd.WriteAt(data[:testPart], 0); err != nil {
		t.Fatal(err)
	}
	if got := f.Size(); got != testPart {
		t.Errorf("Size = %d, want %d", got, testPart)
	}
	buf := make([]byte, 10)
	if n, _ := f.ReadAt(t.Context(), buf, testPart-10); n != 10 || !bytes.Equal(buf, data[testPart-10:testPart]) {
		t.Errorf("read of the external bytes: %q", buf[:n])
	}
	// The rest right after a look (same size: only the change time moves).
	if _, err := fd.WriteAt(data[testPart:], testPart); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt([]byte("ABCD"), 0); err != nil {
		t.Fatal(err)
	}
	fd.Close()
	f.EndExternal()
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, m)
	e.wantObject("ext", append([]byte("ABCD"), data[4:]...))
}

// TestExternalStream: a file the kernel writes streams while it is open
// though nobody looks at it (the poller), and the close sends again just
// the streamed parts whose bytes were written again after they were sent.
func TestExternalStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite []int64 // offsets rewritten after the parts were streamed
		extra   int     // parts sent twice
	}{
		{name: "sequential"},
		{name: "first part rewritten", rewrite: []int64{10}, extra: 1},
		{name: "two parts rewritten", rewrite: []int64{testPart + 5, 3*testPart - 2}, extra: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			m, f, fd := openExternal(t, e, testPart)
			data := pattern(6*testPart+123, 4)
			for off := 0; off < len(data); off += 4096 {
				if _, err := fd.WriteAt(data[off:min(off+4096, len(data))], int64(off)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "parts streamed while open", func() bool { return e.fs.Calls(faulty.OpUploadPart) >= 6 })
			if _, ok := e.object("ext"); ok {
				t.Fatal("object complete before close")
			}
			for _, off := range tc.rewrite {
				if _, err := fd.WriteAt([]byte("patch"), off); err != nil {
					t.Fatal(err)
				}
				copy(data[off:], "patch")
			}
			fd.Close()
			f.EndExternal()
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
			drain(t, m)
			e.wantObject("ext", data)
			if n := e.fs.Calls(faulty.OpUploadPart); n != 7+tc.extra {
				t.Errorf("%d parts sent, want %d (7 parts, %d of them again)", n, 7+tc.extra, tc.extra)
			}
			if e.mem.PendingUploads() != 0 {
				t.Error("multipart upload left pending")
			}
		})
	}
}

// openExternal opens a Manager that lets the kernel write its files
// (streaming after streamAfter bytes when it is not 0), creates "ext" and
// returns it acquired, with the descriptor a writer passed through gets.
func openExternal(t *testing.T, e *env, streamAfter int64) (*Manager, *File, *os.File) {
	t.Helper()
	cfg := e.config()
	cfg.ExternalWrites = true
	cfg.MinFreeBytes = -1
	if streamAfter != 0 {
		cfg.StreamAfter = streamAfter
	}
	m := e.open(cfg)
	f, err := m.Create(tgt("ext"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Acquire()
	fd, _, ok := f.Backing(true)
	if !ok {
		t.Fatal("no backing")
	}
	return m, f, fd
}

// TestAppendAt: a write with O_APPEND lands at the file's end as ferry
// knows it, here moved by the kernel's writes into the staging file,
// whatever the offset given (the kernel's cached size, older).
func TestAppendAt(t *testing.T) {
	tests := []struct {
		name     string
		off      int64
		wantSize int64
	}{
		{name: "offset behind the end", off: 10, wantSize: 4096 + 5},
		{name: "offset at the end", off: 4096, wantSize: 4096 + 5},
		{name: "offset past the end (another node truncated the file)", off: 5000, wantSize: 4096 + 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			_, f, fd := openExternal(t, e, 0)
			if _, err := fd.WriteAt(pattern(4096, 3), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.AppendAt([]byte("tail!"), tc.off); err != nil {
				t.Fatal(err)
			}
			if got := f.Size(); got != tc.wantSize {
				t.Fatalf("size %d, want %d", got, tc.wantSize)
			}
			buf := make([]byte, 5)
			if _, err := fd.ReadAt(buf, tc.wantSize-5); err != nil || string(buf) != "tail!" {
				t.Fatalf("read %q, %v at the end", buf, err)
			}
			if tc.off < 4096 {
				head := make([]byte, 5)
				if _, err := fd.ReadAt(head, tc.off); err != nil || bytes.Equal(head, []byte("tail!")) {
					t.Fatalf("the append overwrote offset %d", tc.off)
				}
			}
		})
	}
}
