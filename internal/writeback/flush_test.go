package writeback

import (
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestFlushSurvivesCrash: close(2) returns after FUSE FLUSH, while the
// RELEASE that ends the handle comes later. A file flushed (and not yet
// released) when ferry dies is uploaded by the next manager on the same
// directory, as of its last change, also when a duplicated descriptor
// wrote again after the flush. A file never flushed is discarded.
func TestFlushSurvivesCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(t *testing.T, f *File)
		want []byte // nil: no object
	}{
		{
			name: "flushed",
			ops: func(t *testing.T, f *File) {
				f.WriteAt([]byte("hello"), 0)
				flush(t, f)
			},
			want: []byte("hello"),
		},
		{
			name: "empty, flushed",
			ops:  func(t *testing.T, f *File) { flush(t, f) },
			want: []byte{},
		},
		{
			name: "flushed twice, written between (dup'ed descriptors)",
			ops: func(t *testing.T, f *File) {
				f.WriteAt([]byte("hello"), 0)
				flush(t, f)
				f.WriteAt([]byte(" world"), 5)
				flush(t, f)
			},
			want: []byte("hello world"),
		},
		{
			name: "written after the flush, not flushed again",
			ops: func(t *testing.T, f *File) {
				f.WriteAt([]byte("hello"), 0)
				flush(t, f)
				f.WriteAt([]byte(" world"), 5)
				f.Truncate(8)
			},
			want: []byte("hello wo"), // as of its last change
		},
		{
			name: "never flushed",
			ops:  func(t *testing.T, f *File) { f.WriteAt([]byte("hello"), 0) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.setFaults(stallUploads())
			m1 := e.manager()
			f, err := m1.Create(tgt("f"), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire() // never released: ferry dies first
			tc.ops(t, f)
			m1.Close()
			e.setFaults(faulty.Config{})
			m2 := e.manager()
			drain(t, m2)
			if tc.want == nil {
				e.wantNoObject("f")
			} else {
				e.wantObject("f", tc.want)
			}
			assertStagingEmpty(t, m2)
		})
	}
}

// TestFlushThenRelease: a flush does not start the upload of a file still
// open (the release does), and the file is uploaded once, whole.
func TestFlushThenRelease(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, err := m.Create(tgt("f"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Acquire()
	f.WriteAt([]byte("hello"), 0)
	flush(t, f)
	f.WriteAt([]byte(" world"), 5)
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, m)
	e.wantObject("f", []byte("hello world"))
	if n := e.fs.Calls(faulty.OpPut); n != 1 {
		t.Errorf("%d Puts, want 1", n)
	}
}

func flush(t *testing.T, f *File) {
	t.Helper()
	if err := f.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}
