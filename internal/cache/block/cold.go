package block

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/hsm"
)

// Cold passthrough (see hsm's package comment and README.md): with a
// pre-content Listener (SetPrecontent), Backing hands out a data file
// that is not whole yet, opened through the Listener's private mount.
// The kernel then reads it itself, and asks first for every range a task
// reads: a coldFile (the Filler of that file's Watch) fetches the blocks
// of the range with the usual machinery (claims across processes, the
// GET budget, readahead that follows each reading process), verifies
// them, and lets the read go on. Once every block is present and
// verified, the file is sealed and its events end (Watch.Whole).
//
// A coldFile is one generation of an object's files (one inode): it
// keeps that objFile referenced, and fills that file even when the
// evictor has since replaced it (the kernel reads the inode it was
// given; blocks fetched into a newer file are copied in). It lives while
// Readers use it as their backing file; when the last one closes, a
// whole file's watch ends at once, a partial one's only when no mapping
// of the mount is left (a mapping outlives every open).

// coldReaders bounds the per-process readahead state of one coldFile
// (Readers not in use beyond it are closed, least recent first). It must
// exceed the number of processes that read one file at once: the events
// of more readers than that come round robin, so each would find its
// Reader closed and start anew (no sequential run, its queued readahead
// dropped, a new Reader per event). At 16, fio's 32 jobs of sequential
// 4 KiB reads of one cold 1 GiB file made 328-456 GETs against 236-251
// at 128 (the FUSE path made 249). A Reader costs a few hundred bytes.
const coldReaders = 128

// coldFile is one sparse data file backing passthrough opens.
type coldFile struct {
	c *Cache
	f *objFile // referenced by the coldFile until dropped
	w *hsm.Watch
	// fillAt: wall ns when Ready last asked for the background fill (see
	// fillEvery).
	fillAt atomic.Int64

	// mu guards the fields below. Never held while taking Cache.mu.
	mu      sync.Mutex
	refs    int                   // Readers whose backing file it is
	readers map[int32]*coldReader // readahead state per reading process (by pid)
	order   []int32               // pids in readers, least recently used first
	whole   bool                  // every block present and verified; events ended
	checks  bool                  // a background check for wholeness is running
	dropped bool
}

// SetPrecontent lets Backing hand out files that are not whole yet (cold
// passthrough), filled on demand through l's events. nil turns it off
// for later opens.
func (c *Cache) SetPrecontent(l *hsm.Listener) { c.hsm.Store(l) }

// coldAllowed reports whether an object of size bytes may be opened cold:
// larger than one block, and fitting half the cache. A one-block object
// comes with one GET either way, and its open costs a FUSE read less
// than the setting up of a cold file (a watch, a backing file, an event:
// a scan of 2,000 objects of 1 KiB took 2.8 s cold against 2.4 s through
// ferry on 2026-11-28). A larger one streams through the cache (evicted
// behind its reader), which a cold backing file cannot do: the kernel
// reads the one inode it was given, and every block would stay in it
// until the open closes. So such objects keep FUSE reads (their page
// cache is the mount's; see README.md). Random reads of a partly cached
// file cost an event each (about 25 µs on these machines), and still
// beat reads through ferry (33-47k against 17-27k 4 KiB reads/s, warm,
// measured on 2026-11-28), so partial files go cold too.
func (c *Cache) coldAllowed(size int64) bool {
	return size > c.cfg.BlockSize && size <= c.cfg.MaxBytes/2
}

// coldOf returns the live coldFile of f with a reference for the caller,
// or nil.
func (c *Cache) coldOf(f *objFile) *coldFile {
	c.coldMu.Lock()
	defer c.coldMu.Unlock()
	cf := c.cold[f]
	if cf == nil {
		return nil
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.dropped {
		return nil
	}
	cf.refs++
	return cf
}

// roomFor reports whether the cache's file system has room for n more
// bytes above its free-space floor (as last sampled): a cold open
// whose fills could not be stored would fail its reads.
func (c *Cache) roomFor(n int64) bool {
	return c.st.free.Load()-n > c.cfg.MinFreeBytes
}

// coldFor returns the coldFile of f with a reference for the caller,
// making it (and the watch of its data file) if needed.
func (c *Cache) coldFor(f *objFile) (*coldFile, error) {
	c.coldMu.Lock()
	defer c.coldMu.Unlock()
	if cf := c.cold[f]; cf != nil {
		cf.mu.Lock()
		if !cf.dropped {
			cf.refs++
			cf.mu.Unlock()
			return cf, nil
		}
		cf.mu.Unlock()
	}
	l := c.hsm.Load()
	if l == nil {
		return nil, errors.New("block: no pre-content listener")
	}
	// A passthrough read stops at the backing file's size: give the file
	// the object's size now (a hole until fetched). ferry's descriptor
	// raises no events (see hsm).
	if st, err := f.data.Stat(); err != nil {
		return nil, err
	} else if st.Size() < f.o.ref.Size {
		if err := f.data.Truncate(f.o.ref.Size); err != nil {
			return nil, cacheIOErr(err)
		}
	}
	// Note which blocks are absent now: those other processes fetch from
	// here on are taken as verified (fresh.go).
	f.loadAll(c)
	cf := &coldFile{c: c, f: f, refs: 1, readers: map[int32]*coldReader{}}
	w, err := l.Watch(f.data, cf)
	if err != nil {
		return nil, err
	}
	cf.w = w
	c.mu.Lock()
	c.refLocked(f)
	c.mu.Unlock()
	c.cold[f] = cf
	c.st.coldFiles.Add(1)
	return cf, nil
}

// coldBacking opens cf's data file through the listener's private mount
// for a passthrough open of r, which takes cf's reference (released by
// r.Close). key names the file's bytes.
func (r *Reader) coldBacking(cf *coldFile) (f *os.File, key string, ok bool) {
	c := r.c
	l := c.hsm.Load()
	if l == nil {
		c.coldRelease(cf)
		return nil, "", false
	}
	rel, err := filepath.Rel(c.cfg.Dir, filepath.Join(cf.f.o.dir, dataName))
	if err == nil {
		f, err = l.Open(rel)
	}
	if err == nil && !sameFile(f, cf.f.data) {
		f.Close()
		err = fmt.Errorf("replaced meanwhile") // evicted and fetched anew: not the inode watched
	}
	if err != nil {
		c.log.Debug("block cache: a cold backing file", "path", cf.f.o.dataPath(), "err", err)
		c.coldRelease(cf)
		return nil, "", false
	}
	r.mu.Lock()
	prev := r.cold
	r.cold = cf
	r.mu.Unlock()
	if prev != nil {
		c.coldRelease(prev)
	}
	return f, backingKey(r.o, cf.f), true
}

// backingKey names the bytes of f (object version and inode): two opens
// with the same key may share one backing file.
func backingKey(o *object, f *objFile) string {
	var st syscall.Stat_t
	syscall.Fstat(int(f.data.Fd()), &st)
	return hexID(o.id) + ":" + strconv.FormatUint(st.Ino, 10)
}

func sameFile(a, b *os.File) bool {
	x, err1 := a.Stat()
	y, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(x, y)
}

// coldRelease drops a Reader's reference on cf. The last one ends the
// watch of a whole file at once; a partial file lingers until sweepCold
// finds no mapping that could still read it.
func (c *Cache) coldRelease(cf *coldFile) {
	cf.mu.Lock()
	cf.refs--
	last := cf.refs == 0
	whole := cf.whole
	cf.mu.Unlock()
	switch {
	case last && whole:
		c.coldDrop(cf, false)
	case last:
		c.stopFill(cf.f.o) // nobody reads on: fetch no more than they asked
	}
}

// coldDrop ends cf's watch and releases its file, unless a Reader took
// it again meanwhile (or force: the cache is closing).
func (c *Cache) coldDrop(cf *coldFile, force bool) {
	c.coldMu.Lock()
	cf.mu.Lock()
	if cf.dropped || (cf.refs > 0 && !force) {
		cf.mu.Unlock()
		c.coldMu.Unlock()
		return
	}
	cf.dropped = true
	whole := cf.whole
	readers := cf.readers
	cf.readers = nil
	cf.mu.Unlock()
	if c.cold[cf.f] == cf {
		delete(c.cold, cf.f)
	}
	c.coldMu.Unlock()
	cf.w.Close(whole)
	for _, r := range readers {
		r.rd.Close() // a fill still using it fails with ErrClosed: its read gets EIO
	}
	c.release(cf.f)
	c.st.coldFiles.Add(-1)
}

// sweepCold drops the lingering partial coldFiles (no Reader uses them)
// once no mapping of the mount can read them; and all of them when the
// cache closes. It runs on the evictor's ticks.
func (c *Cache) sweepCold(closing bool) {
	c.coldMu.Lock()
	var idle, partial []*coldFile
	for _, cf := range c.cold {
		cf.mu.Lock()
		switch {
		case closing || (cf.refs == 0 && cf.whole):
			idle = append(idle, cf)
		case cf.refs == 0:
			partial = append(partial, cf)
		}
		cf.mu.Unlock()
	}
	c.coldMu.Unlock()
	if len(partial) > 0 {
		if l := c.hsm.Load(); l == nil || !l.Mapped() {
			idle = append(idle, partial...)
		}
	}
	for _, cf := range idle {
		c.coldDrop(cf, closing)
	}
}
