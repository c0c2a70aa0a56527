package writeback

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// errStagedChanged ends an upload whose staged bytes changed while it read
// them (a write into them, or a truncation below their end): what it sends
// would be neither the snapshot nor the new content, and a request whose
// body changed fails anyway (a body shorter than its Content-Length, a
// payload hash that no longer matches). It wraps context.Canceled so that
// no layer retries the request; the attempt is abandoned without an error
// and the file uploads its newer content at its next close or sync.
var errStagedChanged = fmt.Errorf("writeback: the staged file changed during its upload: %w", context.Canceled)

// guardedReader reads the staging file for the running attempt, failing
// with errStagedChanged once the bytes asked for changed since the
// attempt's snapshot (see File.changedSinceLocked).
type guardedReader struct {
	f    *File
	rd   io.ReaderAt
	size int64 // the snapshot's size
}

// guard wraps the staging file rd for an attempt of a snapshot of size.
func (f *File) guard(rd io.ReaderAt, size int64) io.ReaderAt {
	return &guardedReader{f: f, rd: rd, size: size}
}

// FileRange lets a driver send the staged bytes from the file after one
// read through ReadAt, which checked them (objstore.FileRange: the
// request then carries their checksum, so a change after that read
// fails it).
func (g *guardedReader) FileRange() (*os.File, int64) {
	f, off, _ := objstore.SourceFile(g.rd)
	return f, off
}

func (g *guardedReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := g.rd.ReadAt(p, off)
	// Checked after the read: bytes read before a change are the
	// snapshot's; a change during the read is seen here.
	if g.f.changedSince(off, min(off+int64(len(p)), g.size)) {
		return 0, errStagedChanged
	}
	return n, err
}

// changedSince reports whether bytes of [off, end) changed since the
// running attempt's snapshot.
func (f *File) changedSince(off, end int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absorbLocked()
	return off < end && (f.truncMin < end || f.written.overlaps(off, end))
}
