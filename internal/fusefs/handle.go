package fusefs

import (
	"context"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/vfs"
)

// handle is one open file.
type handle struct {
	h     *vfs.Handle
	m     *metrics.FUSE
	n     *node    // the node it is open on
	mode  openMode // how the kernel serves it; set by node.attach
	write bool     // opened for writing
	stale bool     // attach found it must not open n (the kernel retries on a new node)
	// flushed: closed (a flush came) and not read or written since; its
	// release follows (see node.closingLocked).
	flushed atomic.Bool
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) obs(op string, start time.Time, errno *syscall.Errno) {
	if h.m != nil {
		h.m.Observe(op, time.Since(start), *errno)
	}
}

// used notes I/O on h: a descriptor of it is still open.
func (h *handle) used() {
	if h.flushed.Load() {
		h.flushed.Store(false)
	}
}

// Read serves a read.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	defer h.obs("read", time.Now(), &errno)
	h.used()
	// A range held whole by one cached block goes to the kernel as a file
	// descriptor (spliced), without a copy through Go.
	if f, fileOff, m, ok := h.h.CachedFile(off, len(dest)); ok {
		n := int64(m)
		if n > spliceMin && n <= spliceMax() {
			return fuse.ReadResultFd(f.Fd(), fileOff, int(n)), 0
		}
		// Small reads: one pread costs less than splice's three calls.
		// Reads too large for one pipe (max_read is not ours through
		// fusermount) are copied too.
		if m, err := f.ReadAt(dest[:n], fileOff); err == nil || int64(m) == n {
			return fuse.ReadResultData(dest[:n]), 0
		}
	}
	n, err := h.h.Read(ctx, dest, off)
	if err != nil {
		return nil, vfs.Errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// spliceMin is the read size up to which cached bytes are copied with
// pread rather than spliced.
const spliceMin = 32 << 10

// spliceMax is the largest read go-fuse can splice: the data and the
// reply header (rounded up to a page) fit in one pipe. Beyond it go-fuse
// fails the splice, logs, and falls back to a copy.
func spliceMax() int64 { return int64(splice.MaxPipeSize()) - 2*4096 }

// Write stages data on local disk.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	defer h.obs("write", time.Now(), &errno)
	h.used()
	n, err := h.h.Write(data, off)
	h.n.notifyKin()
	if err != nil {
		return uint32(n), vfs.Errno(err)
	}
	return uint32(n), 0
}

// Flush is called on every close(2) (synchronously, unlike Release): the
// data is staged already; the file is journaled as closed.
func (h *handle) Flush(ctx context.Context) (errno syscall.Errno) {
	defer h.obs("flush", time.Now(), &errno)
	h.flushed.Store(true)
	return vfs.Errno(h.h.Flush())
}

// Fsync makes the file durable in the bucket.
func (h *handle) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer h.obs("fsync", time.Now(), &errno)
	return vfs.Errno(h.h.Fsync(ctx))
}

// Release closes the handle and queues a written file for upload.
func (h *handle) Release(ctx context.Context) (errno syscall.Errno) {
	defer h.obs("release", time.Now(), &errno)
	h.n.detach(h)
	if h.mode == modePassthrough && h.write && h.n.pt != nil {
		// Its staging file may still be written through a mapping
		// (mapwait.go).
		return vfs.Errno(h.n.pt.mapw.release(h))
	}
	return vfs.Errno(h.h.Release())
}
