package block

import (
	"bytes"
	"container/list"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// maxIdle bounds the open segment files no Reader holds. Files beyond it
// are closed, least recently released first (their verified bits are lost;
// the next open verifies again).
const maxIdle = 256

// blockMeta is a present block's checksums. It is replaced, never mutated,
// except for verified.
type blockMeta struct {
	crcs []uint32
	// verified has bit c set once chunk c has been checked against crcs
	// (blocks this process fetched start all set: their bytes were
	// checksummed on the way in).
	verified atomic.Uint64
}

// segFile is one open segment file. Present blocks are immutable (a block
// is only ever rewritten with the same bytes), so holders pread without
// locks.
type segFile struct {
	id   segID
	o    *object // geometry (any Ref of the same object version)
	path string
	f    *os.File
	// blocks[b] is the meta of slot b when it is known present.
	blocks [maxSegBlocks]atomic.Pointer[blockMeta]
	hdrOK  atomic.Bool // the identity header is known written
	ent    *entry      // index entry, for last-access times; set before publication

	// Guarded by Cache.mu:
	refs   int           // holders: Readers and fetches writing into it
	idleEl *list.Element // in Cache.idle while refs == 0 and mapped
}

func (sf *segFile) touch() {
	if sf.ent != nil {
		sf.ent.atime.Store(time.Now().UnixNano())
	}
}

// load reports whether slot b is present, reading its record from disk
// when this process has not seen it (another process may have written it).
func (sf *segFile) load(c *Cache, b int64) bool {
	if sf.blocks[b].Load() != nil {
		return true
	}
	o := sf.o
	n := o.blockLen(sf.id.seg*o.segBlocks + b)
	rec := make([]byte, o.recLen)
	if _, err := sf.f.ReadAt(rec, o.recOff(b)); err != nil {
		return false // a short file: not written yet
	}
	crcs, ok, bad := o.parseRecord(rec, sf.id.seg, b, n)
	if bad {
		c.st.corruptions.Add(1)
		c.log.Warn("block cache: bad block record, refetching", "path", sf.path, "slot", b)
	}
	if !ok {
		return false
	}
	sf.blocks[b].CompareAndSwap(nil, &blockMeta{crcs: crcs})
	return true
}

// allChunks is the verified mask of a block of n bytes.
func allChunks(n, chunk int64) uint64 {
	k := nChunks(n, chunk)
	if k >= 64 {
		return ^uint64(0)
	}
	return 1<<k - 1
}

// check verifies the chunks of slot b overlapping [off, off+n) (offsets in
// the block) that are not yet verified. p, when not nil, holds the file's
// bytes of that range; chunks not wholly in p are read into a scratch
// buffer. A mismatch (or a block no longer present) is errCorrupt.
func (sf *segFile) check(c *Cache, b int64, p []byte, off, n int64) error {
	m := sf.blocks[b].Load()
	if m == nil {
		return errCorrupt
	}
	if n <= 0 {
		return nil
	}
	o := sf.o
	chunk := o.chunk
	first, last := off/chunk, (off+n-1)/chunk
	mask := (^uint64(0) >> (63 - last)) &^ (1<<first - 1)
	v := m.verified.Load()
	if v&mask == mask {
		return nil
	}
	blen := o.blockLen(sf.id.seg*o.segBlocks + b)
	end := off + int64(len(p))
	for ch := first; ch <= last; ch++ {
		if v&(1<<ch) != 0 {
			continue
		}
		cs, ce := ch*chunk, min((ch+1)*chunk, blen)
		var sum uint32
		if p != nil && cs >= off && ce <= end {
			sum = crc32.Checksum(p[cs-off:ce-off], castagnoli)
		} else {
			bp := c.scratch.Get().(*[]byte)
			buf := (*bp)[:ce-cs]
			_, err := sf.f.ReadAt(buf, o.dataOff(b)+cs)
			sum = crc32.Checksum(buf, castagnoli)
			c.scratch.Put(bp)
			if err != nil {
				return err
			}
		}
		if sum != m.crcs[ch] {
			return errCorrupt
		}
		m.verified.Or(1 << ch)
	}
	return nil
}

// read fills p from slot b at off (in the block) and verifies what it read.
func (sf *segFile) read(c *Cache, b int64, p []byte, off int64) error {
	if _, err := sf.f.ReadAt(p, sf.o.dataOff(b)+off); err != nil {
		if err == io.EOF {
			return errCorrupt // the file is shorter than its record says
		}
		return err
	}
	return sf.check(c, b, p, off, int64(len(p)))
}

// openSeg returns segment seg of o with a reference taken, from the open
// files or from disk; nil when it is not on disk and create is false. With
// create, a missing file (and its directory) is created. Errors: ErrClosed,
// and file-system errors when creating.
func (c *Cache) openSeg(o *object, seg int64, create bool) (*segFile, error) {
	id := o.sid(seg)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if sf := c.files[id]; sf != nil {
		c.refLocked(sf)
		c.mu.Unlock()
		return sf, nil
	}
	stamp := c.stamps
	c.mu.Unlock()

	sf, size, err := c.openDisk(o, seg, create)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sf == nil {
		if err == nil {
			c.indexStaleLocked(id, stamp)
		}
		return nil, err
	}
	if c.closed {
		sf.f.Close()
		return nil, ErrClosed
	}
	if cur := c.files[id]; cur != nil {
		sf.f.Close()
		c.refLocked(cur)
		return cur, nil
	}
	if e := c.index[id]; e != nil {
		sf.ent = e
	} else {
		sf.ent = c.indexAddLocked(id, size, false)
	}
	c.files[id] = sf
	c.refLocked(sf)
	return sf, nil
}

// openDisk opens segment seg of o and checks its identity header. It
// returns nil (and no error) when there is no usable file and create is
// false; a file with a foreign header is removed and counted as corrupt.
// size is the file's allocated bytes.
func (c *Cache) openDisk(o *object, seg int64, create bool) (*segFile, int64, error) {
	path := o.segPath(seg)
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, flag, 0o600)
		if create && errors.Is(err, fs.ErrNotExist) && attempt == 0 {
			if err = os.MkdirAll(o.dir, 0o700); err == nil {
				continue
			}
		}
		if err != nil {
			if !create && errors.Is(err, fs.ErrNotExist) {
				return nil, 0, nil
			}
			if !create {
				c.log.Warn("block cache: open", "path", path, "err", err)
				return nil, 0, nil
			}
			return nil, 0, err
		}
		want := o.segHeader(seg)
		got := make([]byte, segHeadLen)
		n, _ := f.ReadAt(got, 0)
		sf := &segFile{id: o.sid(seg), o: o, path: path, f: f}
		switch {
		case n == segHeadLen && bytes.Equal(got, want):
			sf.hdrOK.Store(true)
		case bytes.Count(got[:n], []byte{0}) == n:
			// New (or being created by another process): no blocks yet.
		default:
			c.st.corruptions.Add(1)
			c.log.Warn("block cache: dropping segment with a bad header", "path", path)
			removeIfSame(path, f)
			f.Close()
			if create && attempt < 2 {
				continue
			}
			return nil, 0, nil
		}
		var size int64
		if fi, err := f.Stat(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				size = st.Blocks * 512
			}
		}
		return sf, size, nil
	}
}

// removeIfSame unlinks path if it still names the file f has open (another
// process may have replaced it meanwhile).
func removeIfSame(path string, f *os.File) {
	a, err1 := os.Stat(path)
	b, err2 := f.Stat()
	if err1 == nil && err2 == nil && os.SameFile(a, b) {
		os.Remove(path)
	}
}

// refLocked takes a reference on sf. c.mu must be held.
func (c *Cache) refLocked(sf *segFile) {
	sf.refs++
	if sf.idleEl != nil {
		c.idle.Remove(sf.idleEl)
		sf.idleEl = nil
	}
}

// release drops a reference taken by openSeg.
func (c *Cache) release(sf *segFile) {
	c.mu.Lock()
	sf.refs--
	var toClose []*os.File
	if sf.refs == 0 {
		if c.closed || c.files[sf.id] != sf {
			toClose = append(toClose, sf.f)
		} else {
			toClose = c.idleLocked(sf, toClose)
		}
		if c.bytes > c.cfg.MaxBytes {
			c.kickEvictor() // it may have skipped this segment while held
		}
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
}

// idleLocked parks sf (mapped, refs == 0) on the idle list and returns the
// files to close to keep that list within maxIdle. c.mu must be held.
func (c *Cache) idleLocked(sf *segFile, toClose []*os.File) []*os.File {
	sf.idleEl = c.idle.PushFront(sf)
	for c.idle.Len() > maxIdle {
		old := c.idle.Remove(c.idle.Back()).(*segFile)
		old.idleEl = nil
		delete(c.files, old.id)
		toClose = append(toClose, old.f)
	}
	return toClose
}

// drop forgets slot b of sf, found corrupt while reading, and clears its
// record on disk, so the next read fetches it again.
func (c *Cache) drop(sf *segFile, b int64) {
	c.st.corruptions.Add(1)
	c.log.Warn("block cache: checksum mismatch, refetching", "path", sf.path, "slot", b)
	if sf.blocks[b].Swap(nil) == nil {
		return // someone else dropped it
	}
	a, err1 := os.Stat(sf.path)
	fi, err2 := sf.f.Stat()
	if err1 == nil && err2 == nil && os.SameFile(a, fi) {
		sf.f.WriteAt(make([]byte, sf.o.recLen), sf.o.recOff(b))
	}
}
