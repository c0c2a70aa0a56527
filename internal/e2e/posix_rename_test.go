package e2e

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestReaderOfRewrittenFile: a descriptor opened for reading on a file
// that is then rewritten through another descriptor (O_TRUNC, a write at
// an offset, close, fsync: it becomes a new version in the bucket) reads
// the new bytes, whole, before and after a rename of the file (soak model
// seeds 1795609156396133170: ESTALE after the rename; 1795779432646344951:
// reads cut at the size the file had at open), in every read mode (a
// file of one block is not opened cold; the model test covers the
// snapshot a cold passthrough open reads).
func TestReaderOfRewrittenFile(t *testing.T) {
	t.Parallel()
	for _, mode := range readModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			readerOfRewrittenFile(t, mode)
		})
	}
}

func readerOfRewrittenFile(t *testing.T, mode string) {
	e := newS3Env(t)
	startMount(t, e, e.srv.Endpoint, mountModeFlags(mode)...)
	for _, rename := range []bool{false, true} {
		name := map[bool]string{false: "stay", true: "renamed"}[rename]
		t.Run(name, func(t *testing.T) {
			// A clean object, in a directory the mount has not listed yet.
			e.put("q/"+name, []byte("old content"))
			p := e.path("q/" + name)
			if fi, err := os.Stat(p); err != nil || fi.Size() != 11 {
				t.Fatalf("stat: %v, %v", fi, err)
			}
			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 60837)
			tail := randBytes(t, 583)
			copy(want[60254:], tail)
			read := want // an object of one block is never opened cold
			if _, err := w.WriteAt(tail, 60254); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Let writeback forget the durable file: the rename then copies
			// the new version in the bucket (the path that failed).
			time.Sleep(500 * time.Millisecond)
			if rename {
				if err := os.Rename(p, p+".2"); err != nil {
					t.Fatal(err)
				}
			}
			for _, rd := range []struct{ off, n int }{{15400, 53347}, {0, 6648}, {60000, 1000}} {
				buf := make([]byte, rd.n)
				n, _ := r.ReadAt(buf, int64(rd.off))
				w := read[min(rd.off, len(read)):min(rd.off+rd.n, len(read))]
				if n != len(w) || !bytes.Equal(buf[:n], w) {
					t.Errorf("read at %d: %d bytes (want %d), same bytes: %v", rd.off, n, len(w), bytes.Equal(buf[:min(n, len(w))], w[:min(n, len(w))]))
				}
			}
			if fi, err := r.Stat(); err != nil || fi.Size() != int64(len(want)) {
				t.Errorf("fstat: %v, %v; want size %d", fi, err, len(want))
			}
		})
	}
}
