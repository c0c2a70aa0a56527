package writeback

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// openBase opens the object key as the base of a dirty file, with a handle.
func openBase(t *testing.T, e *env, m *Manager, key string) *File {
	t.Helper()
	info, err := e.mem.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenBase(context.Background(), tgt(key), info)
	if err != nil {
		t.Fatalf("OpenBase %s: %v", key, err)
	}
	f.Acquire()
	return f
}

func readAllFile(t *testing.T, f *File) []byte {
	t.Helper()
	buf := make([]byte, f.Size()+7)
	n, err := f.ReadAt(context.Background(), buf, 0)
	if err != io.EOF {
		t.Fatalf("ReadAt to the end: %d, %v; want io.EOF", n, err)
	}
	return buf[:n]
}

func TestOpenBaseReadsThrough(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(3*testPart+5, 1)
	e.putObject("b", orig)
	f := openBase(t, e, m, "b")
	if got := readAllFile(t, f); !bytes.Equal(got, orig) {
		t.Fatal("read of a clean base differs")
	}
	if _, err := f.WriteAt([]byte("XY"), 10); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(orig)
	copy(want[10:], "XY")
	if got := readAllFile(t, f); !bytes.Equal(got, want) {
		t.Fatal("read after a write over the base differs")
	}
	if e.fs.Calls(faulty.OpPut)+e.fs.Calls(faulty.OpUploadPart) != 0 {
		t.Fatal("uploaded while open")
	}
	if !f.HasBase("b") || f.HasBase("c") {
		t.Errorf("HasBase(b) = %v, HasBase(c) = %v", f.HasBase("b"), f.HasBase("c"))
	}
	f.Release()
	drain(t, m)
	e.wantObject("b", want)
}

// TestAppendUploadsOnlyChangedParts: appending to a large object copies
// its unchanged parts on the server and uploads only the last one.
func TestAppendUploadsOnlyChangedParts(t *testing.T) {
	tests := []struct {
		name                 string
		size                 int // base object size
		off                  int // where the write goes (-1: append)
		wantUploads, wantCps int
	}{
		{name: "append", size: 8 * testPart, off: -1, wantUploads: 1, wantCps: 8},
		{name: "append to a partial last part", size: 8*testPart + 100, off: -1, wantUploads: 1, wantCps: 8},
		{name: "rewrite in the middle", size: 8 * testPart, off: 3*testPart + 7, wantUploads: 1, wantCps: 7},
		{name: "write across two parts", size: 8 * testPart, off: 2*testPart - 1, wantUploads: 2, wantCps: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			orig := pattern(tc.size, 2)
			e.putObject("big", orig)
			f := openBase(t, e, m, "big")
			off := tc.off
			if off < 0 {
				off = tc.size
			}
			if _, err := f.WriteAt([]byte("x\n"), int64(off)); err != nil {
				t.Fatal(err)
			}
			f.Release()
			drain(t, m)
			want := append(bytes.Clone(orig), make([]byte, max(0, off+2-tc.size))...)
			copy(want[off:], "x\n")
			e.wantObject("big", want)
			up, cp := e.fs.Calls(faulty.OpUploadPart), e.fs.Calls(faulty.OpCopyPart)
			if up != tc.wantUploads || cp != tc.wantCps || e.fs.Calls(faulty.OpPut) != 0 {
				t.Errorf("UploadPart %d, CopyPart %d, Put %d; want %d, %d, 0", up, cp, e.fs.Calls(faulty.OpPut), tc.wantUploads, tc.wantCps)
			}
			if n := e.fs.Calls(faulty.OpNewReader); n > tc.wantUploads {
				t.Errorf("%d base reads, want at most one per uploaded part", n)
			}
		})
	}
}

// noCopyPart hides the backend's CopyPart.
type noCopyPart struct{ *recorder }

func (s noCopyPart) Caps() objstore.Caps {
	c := s.recorder.Caps()
	c.CopyPart = false
	return c
}

// TestAppendWithoutCopyPart: without CopyPart the clean bytes are fetched
// into the staging file and the whole object is uploaded.
func TestAppendWithoutCopyPart(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	m, err := New(context.Background(), cfg, func(context.Context, string, string) (objstore.Store, error) {
		return noCopyPart{e.rec}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	orig := pattern(4*testPart+3, 3)
	e.putObject("big", orig)
	f := openBase(t, e, m, "big")
	f.WriteAt([]byte("!"), int64(len(orig)))
	f.Release()
	drain(t, m)
	e.wantObject("big", append(bytes.Clone(orig), '!'))
	if cp := e.fs.Calls(faulty.OpCopyPart); cp != 0 {
		t.Errorf("CopyPart called %d times", cp)
	}
}

func TestTruncateBase(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	orig := pattern(4*testPart, 4)
	e.putObject("tb", orig)
	f := openBase(t, e, m, "tb")
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 * testPart); err != nil { // grows again: zeros
		t.Fatal(err)
	}
	f.WriteAt([]byte("end"), 3*testPart-3)
	want := make([]byte, 3*testPart)
	copy(want, orig[:100])
	copy(want[3*testPart-3:], "end")
	if got := readAllFile(t, f); !bytes.Equal(got, want) {
		t.Fatalf("read after truncate differs at %d", firstDiff(got, want))
	}
	f.Release()
	drain(t, m)
	e.wantObject("tb", want)
}

// TestBaseChangedElsewhere: when another client overwrites the base
// object, the upload fails (it would mix two versions) and Drain says so.
func TestBaseChangedElsewhere(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	e.putObject("c", pattern(5*testPart, 5))
	f := openBase(t, e, m, "c")
	f.WriteAt([]byte("mine"), 0)
	e.putObject("c", []byte("theirs"))
	f.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	err := m.Drain(ctx)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failures) != 1 || !errors.Is(de.Failures[0].Err, objstore.ErrPrecondition) {
		t.Fatalf("Drain = %v, want a DrainError with ErrPrecondition", err)
	}
	e.wantObject("c", []byte("theirs"))
}

// TestOpenBaseUnchanged: a base opened and released without a change
// uploads nothing and leaves no staging.
func TestOpenBaseUnchanged(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	e.putObject("u", []byte("same"))
	f := openBase(t, e, m, "u")
	f.Release()
	drain(t, m)
	if n := e.fs.Calls(faulty.OpPut) + e.fs.Calls(faulty.OpCopy) + e.fs.Calls(faulty.OpCreateUpload); n != 0 {
		t.Errorf("%d upload calls for an unchanged file", n)
	}
	assertStagingEmpty(t, m)
	if m.Get(tgt("u")) != nil {
		t.Error("the unchanged file is still listed")
	}
}
