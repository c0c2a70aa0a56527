package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// countingRange is a FileRange source over a file that counts the bytes
// read through it and, with flip, returns one byte other than the file
// holds (as if the file changed after that read).
type countingRange struct {
	f    *os.File
	off  int64
	read atomic.Int64
	flip int64 // offset (in the source) of the byte to flip, or -1
}

func (c *countingRange) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.f.ReadAt(p, c.off+off)
	c.read.Add(int64(n))
	if c.flip >= off && c.flip < off+int64(n) {
		p[c.flip-off] ^= 0xff
	}
	return n, err
}

func (c *countingRange) FileRange() (*os.File, int64) { return c.f, c.off }

// stagedFile returns a file holding data, open for reading (closed at
// the test's end).
func stagedFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "staged")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFileBodySent: a source that is a range of a local file is read
// once (for its checksum) and its bytes are sent from the file, at the
// range's offset; a plain source and a small one land as well.
func TestFileBodySent(t *testing.T) {
	s, _ := minioStore(t, nil)
	ctx := context.Background()
	data := randomBytes(7, 3*minPartSize+4321)
	f := stagedFile(t, data)
	const off = minPartSize + 123
	size := int64(minPartSize + 4000)
	want := data[off : off+size]
	for _, tc := range []struct {
		name     string
		src      func() (io.ReaderAt, *countingRange)
		size     int64
		want     []byte
		maxReads int64 // bytes read through the source at most
	}{
		{"file range", func() (io.ReaderAt, *countingRange) {
			c := &countingRange{f: f, off: off, flip: -1}
			return c, c
		}, size, want, size},
		{"section of a file range", func() (io.ReaderAt, *countingRange) {
			c := &countingRange{f: f, flip: -1}
			return io.NewSectionReader(c, off, size), c
		}, size, want, size},
		{"section of an os.File", func() (io.ReaderAt, *countingRange) {
			return io.NewSectionReader(f, off, size), nil
		}, size, want, 0},
		{"in memory", func() (io.ReaderAt, *countingRange) {
			return bytes.NewReader(want), nil
		}, size, want, 0},
		{"small file range", func() (io.ReaderAt, *countingRange) {
			c := &countingRange{f: f, off: off, flip: -1}
			return c, c
		}, 5000, want[:5000], 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			src, c := tc.src()
			if _, err := s.Put(ctx, key, src, tc.size, objstore.PutOptions{}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if got := readAll(t, s, key); !bytes.Equal(got, tc.want) {
				t.Fatalf("Put: %d bytes in the bucket differ from the %d sent", len(got), len(tc.want))
			}
			if c != nil && c.read.Load() > tc.maxReads {
				t.Errorf("Put read %d bytes of the source, want %d (one pass)", c.read.Load(), tc.maxReads)
			}
			src, c = tc.src()
			u, err := s.CreateUpload(ctx, key+"-mp", objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := u.UploadPart(ctx, 1, src, tc.size); err != nil {
				t.Fatalf("UploadPart: %v", err)
			}
			if c != nil && c.read.Load() > tc.maxReads {
				t.Errorf("UploadPart read %d bytes of the source, want %d (one pass)", c.read.Load(), tc.maxReads)
			}
			if _, err := u.Complete(ctx); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got := readAll(t, s, key+"-mp"); !bytes.Equal(got, tc.want) {
				t.Fatalf("upload: %d bytes in the bucket differ from the %d sent", len(got), len(tc.want))
			}
		})
	}
}

// closedRange is a source that reads through one descriptor of a file
// and names another, closed, as its FileRange: the driver cannot open
// that one again and sends what the source reads, as the SDK would.
type closedRange struct {
	r      io.ReaderAt
	closed *os.File
}

func (c closedRange) ReadAt(p []byte, off int64) (int, error) { return c.r.ReadAt(p, off) }
func (c closedRange) FileRange() (*os.File, int64)            { return c.closed, 0 }

// TestFileBodyFallback: a file range that cannot be opened again (closed
// meanwhile, no /proc) goes out through the source's ReadAt.
func TestFileBodyFallback(t *testing.T) {
	s, _ := minioStore(t, nil)
	ctx := context.Background()
	data := randomBytes(9, minPartSize+777)
	f := stagedFile(t, data)
	closed, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	src := closedRange{r: f, closed: closed}
	if _, err := s.Put(ctx, "put", src, int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := readAll(t, s, "put"); !bytes.Equal(got, data) {
		t.Fatalf("Put: %d bytes in the bucket differ from the %d sent", len(got), len(data))
	}
}

// TestFileBodyChangedRefused: when the file's bytes differ from what the
// checksum pass read (the file changed in between), the server refuses
// the body: nothing lands.
func TestFileBodyChangedRefused(t *testing.T) {
	s, _ := minioStore(t, nil)
	ctx := context.Background()
	data := randomBytes(8, 2*minPartSize)
	f := stagedFile(t, data)
	size := int64(len(data))
	src := func() io.ReaderAt { return &countingRange{f: f, flip: size / 2} }
	if _, err := s.Put(ctx, "put", src(), size, objstore.PutOptions{}); !isChecksumErr(err) {
		t.Errorf("Put of a changed file: %v, want a checksum mismatch", err)
	}
	if _, err := s.Stat(ctx, "put"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat of the refused Put: %v, want not found", err)
	}
	u, err := s.CreateUpload(ctx, "part", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort(context.Background())
	if err := u.UploadPart(ctx, 1, src(), size); !isChecksumErr(err) {
		t.Errorf("UploadPart of a changed file: %v, want a checksum mismatch", err)
	}
}

func isChecksumErr(err error) bool {
	return err != nil && (strings.Contains(strings.ToLower(err.Error()), "checksum") || strings.Contains(err.Error(), "BadDigest"))
}
