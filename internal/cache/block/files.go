package block

import (
	"container/list"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"sync/atomic"
	"time"
)

// maxIdle bounds the open block files no Reader holds. Files beyond it are
// closed, least recently released first (their verified bits are lost; the
// next open verifies again).
const maxIdle = 1024

// blockFile is one open block file. The file is immutable once renamed into
// place, so any holder may pread it without locks.
type blockFile struct {
	id    blockID
	path  string
	f     *os.File
	n     int64    // data bytes (the trailer follows them)
	chunk int64    // checksum chunk size
	crcs  []uint32 // CRC32C of each chunk, from the trailer
	// verified has bit c set once chunk c has been checked against crcs
	// (fetched blocks start all set: their bytes were checksummed on the way
	// in).
	verified atomic.Uint64
	ent      *entry // index entry, for last-access times; set before publication

	// Guarded by Cache.mu:
	refs   int           // Readers holding the file
	idleEl *list.Element // in Cache.idle while refs == 0 and mapped
}

func (bf *blockFile) touch() {
	if bf.ent != nil {
		bf.ent.atime.Store(time.Now().UnixNano())
	}
}

// allChunks is the verified mask of a block with every chunk checked.
func allChunks(n, chunk int64) uint64 {
	k := nChunks(n, chunk)
	if k >= 64 {
		return ^uint64(0)
	}
	return 1<<k - 1
}

// check verifies the chunks overlapping [off, off+n) that are not yet
// verified. p, when not nil, holds the file's bytes of that range; chunks
// not wholly in p are read into a scratch buffer. A mismatch is errCorrupt.
func (bf *blockFile) check(c *Cache, p []byte, off, n int64) error {
	if n <= 0 {
		return nil
	}
	first, last := off/bf.chunk, (off+n-1)/bf.chunk
	mask := (^uint64(0) >> (63 - last)) &^ (1<<first - 1)
	v := bf.verified.Load()
	if v&mask == mask {
		return nil
	}
	end := off + int64(len(p))
	for ch := first; ch <= last; ch++ {
		if v&(1<<ch) != 0 {
			continue
		}
		cs, ce := ch*bf.chunk, min((ch+1)*bf.chunk, bf.n)
		var sum uint32
		if p != nil && cs >= off && ce <= end {
			sum = crc32.Checksum(p[cs-off:ce-off], castagnoli)
		} else {
			bp := c.scratch.Get().(*[]byte)
			buf := (*bp)[:ce-cs]
			_, err := bf.f.ReadAt(buf, cs)
			sum = crc32.Checksum(buf, castagnoli)
			c.scratch.Put(bp)
			if err != nil {
				return err
			}
		}
		if sum != bf.crcs[ch] {
			return errCorrupt
		}
		bf.verified.Or(1 << ch)
	}
	return nil
}

// readAt fills p from the block at off and verifies what it read.
func (bf *blockFile) readAt(c *Cache, p []byte, off int64) error {
	if _, err := bf.f.ReadAt(p, off); err != nil {
		return err
	}
	return bf.check(c, p, off, int64(len(p)))
}

// acquire returns the open block idx of o with a reference taken, or nil
// when the block is not cached. It opens block files written by other
// processes. Errors: ErrClosed.
func (c *Cache) acquire(o *object, idx int64) (*blockFile, error) {
	id := o.bid(idx)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if bf := c.files[id]; bf != nil {
		c.refLocked(bf)
		c.mu.Unlock()
		return bf, nil
	}
	stamp := c.stamps
	c.mu.Unlock()

	bf, size := c.openDisk(o, idx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if bf == nil {
		c.indexStaleLocked(id, stamp)
		return nil, nil
	}
	if c.closed {
		bf.f.Close()
		return nil, ErrClosed
	}
	if cur := c.files[id]; cur != nil {
		bf.f.Close()
		c.refLocked(cur)
		return cur, nil
	}
	bf.ent = c.indexAddLocked(id, size, false)
	c.files[id] = bf
	c.refLocked(bf)
	return bf, nil
}

// openDisk opens block idx of o from disk and checks its trailer. It
// returns nil when there is no valid block there (a corrupt one is removed
// and counted), else the file and its size.
func (c *Cache) openDisk(o *object, idx int64) (*blockFile, int64) {
	path := o.path(idx)
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("block cache: open", "path", path, "err", err)
		}
		return nil, 0
	}
	n := o.blockLen(idx)
	tl := trailerLen(n, o.chunk)
	fi, err := f.Stat()
	if err == nil && fi.Size() != n+tl {
		err = errCorrupt
	}
	var crcs []uint32
	if err == nil {
		t := make([]byte, tl)
		if _, err = f.ReadAt(t, n); err == nil {
			crcs, err = parseTrailer(t, o.bid(idx), n, o.chunk)
		}
	}
	if err != nil {
		c.st.corruptions.Add(1)
		c.log.Warn("block cache: dropping bad block", "path", path, "err", err)
		removeIfSame(path, f)
		f.Close()
		return nil, 0
	}
	return &blockFile{id: o.bid(idx), path: path, f: f, n: n, chunk: o.chunk, crcs: crcs}, fi.Size()
}

// removeIfSame unlinks path if it still names the file f has open (another
// process may have replaced it with a good copy meanwhile).
func removeIfSame(path string, f *os.File) {
	a, err1 := os.Stat(path)
	b, err2 := f.Stat()
	if err1 == nil && err2 == nil && os.SameFile(a, b) {
		os.Remove(path)
	}
}

// refLocked takes a reference on bf. c.mu must be held.
func (c *Cache) refLocked(bf *blockFile) {
	bf.refs++
	if bf.idleEl != nil {
		c.idle.Remove(bf.idleEl)
		bf.idleEl = nil
	}
}

// release drops a reference taken by acquire.
func (c *Cache) release(bf *blockFile) {
	c.mu.Lock()
	bf.refs--
	var toClose []*os.File
	if bf.refs == 0 {
		if c.closed || c.files[bf.id] != bf {
			toClose = append(toClose, bf.f)
		} else {
			toClose = c.idleLocked(bf, toClose)
		}
		if c.bytes > c.cfg.MaxBytes {
			c.kickEvictor() // it may have skipped this block while held
		}
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
}

// idleLocked parks bf (mapped, refs == 0) on the idle list and returns the
// files to close to keep that list within maxIdle. c.mu must be held.
func (c *Cache) idleLocked(bf *blockFile, toClose []*os.File) []*os.File {
	bf.idleEl = c.idle.PushFront(bf)
	for c.idle.Len() > maxIdle {
		old := c.idle.Remove(c.idle.Back()).(*blockFile)
		old.idleEl = nil
		delete(c.files, old.id)
		toClose = append(toClose, old.f)
	}
	return toClose
}

// drop forgets a block found corrupt while reading and removes its file, so
// the next read fetches it again.
func (c *Cache) drop(bf *blockFile) {
	c.st.corruptions.Add(1)
	c.log.Warn("block cache: checksum mismatch, refetching", "path", bf.path)
	c.mu.Lock()
	if c.files[bf.id] == bf {
		delete(c.files, bf.id)
		if bf.idleEl != nil {
			c.idle.Remove(bf.idleEl)
			bf.idleEl = nil
		}
		c.indexRemoveLocked(bf.id)
	}
	c.mu.Unlock()
	removeIfSame(bf.path, bf.f)
}
