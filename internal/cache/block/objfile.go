package block

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// blockMeta is a present block's checksums. It is replaced, never mutated,
// except for verified.
type blockMeta struct {
	crcs []uint32
	// verified has bit c set once chunk c has been checked against crcs
	// (blocks this process fetched start all set: their bytes were
	// checksummed on the way in).
	verified atomic.Uint64
}

// objFile is one open object version: its data file and its index file.
// Present blocks are immutable (a block is only ever rewritten with the
// same bytes), so holders pread without locks.
type objFile struct {
	o    *object
	data *os.File // the object's bytes at their own offsets
	idx  *os.File // header, seal and block records
	// blocks[i] is the meta of block i when it is known present.
	blocks []atomic.Pointer[blockMeta]
	// seenAbsent has bit i set once this process found block i's record
	// absent (see fresh.go): a record that appears after that was written
	// in this boot by a fetch that checksummed the bytes on their way in.
	seenAbsent []atomic.Uint64
	have       atomic.Int64 // blocks with a meta
	hdrOK      atomic.Bool  // the index header is known written
	ent        *entry       // index entry, for last-access times; set before publication
	seal       sealState    // what this process knows of the data file being whole (seal.go)

	// Guarded by Cache.mu:
	refs   int           // holders: Readers and fetches writing into it
	idleEl *list.Element // in Cache.idle while refs == 0 and mapped
	gone   bool          // evicted (unlinked) while held: its bytes stay counted until the last release closes it
}

func (f *objFile) touch() {
	if f.ent != nil {
		f.ent.atime.Store(time.Now().UnixNano())
	}
}

// setMeta publishes block idx as present.
func (f *objFile) setMeta(idx int64, m *blockMeta) {
	if f.blocks[idx].Swap(m) == nil {
		f.have.Add(1)
	}
}

// load reports whether block idx is present, reading its record from disk
// when this process has not seen it (another process may have written it).
func (f *objFile) load(c *Cache, idx int64) bool {
	if f.blocks[idx].Load() != nil {
		return true
	}
	o := f.o
	rec := make([]byte, o.recLen)
	if _, err := f.idx.ReadAt(rec, o.recOff(idx)); err != nil {
		f.markAbsent(idx)
		return false // a short file: not written yet
	}
	return f.parse(c, idx, rec)
}

// parse publishes block idx from its record rec when it is valid.
func (f *objFile) parse(c *Cache, idx int64, rec []byte) bool {
	crcs, ok, bad := f.o.parseRecord(rec, idx, f.o.blockLen(idx))
	if bad {
		c.st.corruptions.Add(1)
		c.log.Warn("block cache: bad block record, refetching", "path", f.o.idxPath(), "block", idx)
	}
	if !ok {
		if !bad {
			f.markAbsent(idx)
		}
		return false
	}
	m := &blockMeta{crcs: crcs}
	fresh := f.fresh(idx)
	if fresh {
		m.verified.Store(allChunks(f.o.blockLen(idx), f.o.chunk))
	}
	if f.blocks[idx].CompareAndSwap(nil, m) {
		f.have.Add(1)
		if fresh {
			c.st.freshBlocks.Add(1)
		}
	}
	return true
}

// loadAll loads the records of every block not known present, reading the
// index in large pieces; it reports whether all blocks are present.
func (f *objFile) loadAll(c *Cache) bool {
	o := f.o
	const span = 1 << 20
	per := max(1, span/o.recLen)
	var buf []byte
	for first := int64(0); first < o.nblocks && f.have.Load() < o.nblocks; first += per {
		n := min(per, o.nblocks-first)
		missing := false
		for i := first; i < first+n && !missing; i++ {
			missing = f.blocks[i].Load() == nil
		}
		if !missing {
			continue
		}
		if buf == nil {
			buf = make([]byte, min(per, o.nblocks)*o.recLen) // not 1 MiB for a one-block object
		}
		b := buf[:n*o.recLen]
		if m, _ := f.idx.ReadAt(b, o.recOff(first)); int64(m) < int64(len(b)) {
			clear(b[m:])
		}
		for i := first; i < first+n; i++ {
			if f.blocks[i].Load() == nil {
				f.parse(c, i, b[(i-first)*o.recLen:(i-first+1)*o.recLen])
			}
		}
	}
	return f.have.Load() == o.nblocks
}

// allChunks is the verified mask of a block of n bytes.
func allChunks(n, chunk int64) uint64 {
	k := nChunks(n, chunk)
	if k >= 64 {
		return ^uint64(0)
	}
	return 1<<k - 1
}

// check verifies the chunks of block idx overlapping [off, off+n)
// (offsets in the block) that are not yet verified. p, when not nil, holds
// the file's bytes of that range; chunks not wholly in p are read into a
// scratch buffer. A mismatch (or a block no longer present) is errCorrupt.
func (f *objFile) check(c *Cache, idx int64, p []byte, off, n int64) error {
	m := f.blocks[idx].Load()
	if m == nil {
		return errCorrupt
	}
	if n <= 0 {
		return nil
	}
	o := f.o
	chunk := o.chunk
	first, last := off/chunk, (off+n-1)/chunk
	mask := (^uint64(0) >> (63 - last)) &^ (1<<first - 1)
	v := m.verified.Load()
	if v&mask == mask {
		return nil
	}
	blen := o.blockLen(idx)
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
			k, err := f.data.ReadAt(buf, idx*o.bs+cs)
			sum = crc32.Checksum(buf, castagnoli)
			c.scratch.Put(bp)
			if err != nil {
				if k < len(buf) && errors.Is(err, io.EOF) {
					return errCorrupt // the file is shorter than its record says
				}
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

// read fills p from block idx at off (in the block) and verifies what it
// read.
func (f *objFile) read(c *Cache, idx int64, p []byte, off int64) error {
	if _, err := f.data.ReadAt(p, idx*f.o.bs+off); err != nil {
		if err == io.EOF {
			return errCorrupt // the file is shorter than its record says
		}
		return err
	}
	return f.check(c, idx, p, off, int64(len(p)))
}

// openObj returns the files of o with a reference taken, from the open
// files or from disk; nil when they are not on disk and create is false.
// With create, missing files (and their directory) are created. Errors:
// ErrClosed, and file-system errors when creating.
func (c *Cache) openObj(o *object, create bool) (*objFile, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if f := c.files[o.id]; f != nil {
		c.refLocked(f)
		c.mu.Unlock()
		return f, nil
	}
	stamp := c.stamps
	c.mu.Unlock()

	f, size, err := c.openDisk(o, create)
	c.mu.Lock()
	defer c.mu.Unlock()
	if f == nil {
		if err == nil {
			c.indexStaleLocked(o.id, stamp)
		}
		return nil, err
	}
	if c.closed {
		f.closeFiles()
		return nil, ErrClosed
	}
	if cur := c.files[o.id]; cur != nil {
		f.closeFiles()
		c.refLocked(cur)
		return cur, nil
	}
	if e := c.index[o.id]; e != nil {
		f.ent = e
	} else {
		f.ent = c.indexAddLocked(o.id, size, false)
	}
	c.files[o.id] = f
	c.refLocked(f)
	return f, nil
}

func (f *objFile) closeFiles() {
	f.data.Close()
	f.idx.Close()
}

// openDisk opens the files of o and checks the index's identity header.
// It returns nil (and no error) when there is no usable pair and create is
// false. size is the pair's allocated bytes.
//
// A pair is created whole in a directory of its own name and then renamed
// into place, and opened through one descriptor of its directory without
// O_CREAT: so a process never pairs an index with the data file of
// another generation (an evictor removing the directory between the two
// opens makes the second fail, and the open starts over).
//
// An index with a foreign or damaged header is repaired in place: emptied
// (every block absent: they are fetched again into the same data file)
// and given the right header.
func (c *Cache) openDisk(o *object, create bool) (*objFile, int64, error) {
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var f *objFile
		f, err = c.openPair(o)
		if f != nil {
			return f, allocatedOf(f.data) + allocatedOf(f.idx), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		if !create {
			return nil, 0, nil
		}
		if f, err = c.createPair(o); f != nil {
			return f, allocatedOf(f.idx), nil // the data file is empty
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if create {
		return nil, 0, err
	}
	c.log.Warn("block cache: open", "path", o.dir, "err", err)
	return nil, 0, nil
}

// openPair opens o's files; an error wrapping fs.ErrNotExist when either
// is missing.
func (c *Cache) openPair(o *object) (*objFile, error) {
	dir, err := openDir(o.dir)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(dir)
	idx, err := openAt(dir, idxName, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	data, err := openAt(dir, dataName, os.O_RDWR)
	if err != nil {
		idx.Close()
		return nil, err
	}
	f := newObjFile(o, data, idx)
	if f.headerOK() {
		f.hdrOK.Store(true)
		return f, nil
	}
	// Repair under a lock on the header, looking again once it is ours:
	// a second repair after the first would empty an index that others
	// have begun to fill.
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: idHeadLen}
	locked := syscall.FcntlFlock(idx.Fd(), fOFDSetLKW, &lk) == nil
	if !f.headerOK() {
		c.st.corruptions.Add(1)
		c.log.Warn("block cache: emptying a cache index with a bad header", "path", o.idxPath())
		if err := idx.Truncate(0); err == nil {
			idx.WriteAt(o.idxHeader(), 0)
		}
	}
	if locked {
		lk.Type = syscall.F_UNLCK
		syscall.FcntlFlock(idx.Fd(), fOFDSetLK, &lk)
	}
	f.hdrOK.Store(f.headerOK())
	return f, nil
}

// headerOK reports whether f's index starts with its identity header.
func (f *objFile) headerOK() bool {
	got := make([]byte, idHeadLen)
	n, _ := f.idx.ReadAt(got, 0)
	return n == idHeadLen && bytes.Equal(got, f.o.idxHeader())
}

// newSeq numbers the directories this process creates and removes.
var newSeq atomic.Int64

// createPair creates o's directory with both files (the index with its
// header) under a temporary name, renames it into place and returns the
// pair it opened. An error wrapping fs.ErrExist means another process
// (or goroutine) was first.
func (c *Cache) createPair(o *object) (*objFile, error) {
	tmp := fmt.Sprintf("%s%s%d-%d", o.dir, newMark, os.Getpid(), newSeq.Add(1))
	err := os.Mkdir(tmp, 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(o.dir), 0o700); err == nil {
			err = os.Mkdir(tmp, 0o700)
		}
	}
	if err != nil {
		return nil, err
	}
	var idx, data *os.File
	err = func() error {
		if idx, err = os.OpenFile(filepath.Join(tmp, idxName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return err
		}
		if _, err := idx.WriteAt(o.idxHeader(), 0); err != nil {
			return err
		}
		data, err = os.OpenFile(filepath.Join(tmp, dataName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		return err
	}()
	if err == nil {
		err = os.Rename(tmp, o.dir)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			err = fs.ErrExist
		}
	}
	if err != nil {
		for _, f := range []*os.File{idx, data} {
			if f != nil {
				f.Close()
			}
		}
		os.RemoveAll(tmp)
		return nil, err
	}
	f := newObjFile(o, data, idx)
	f.hdrOK.Store(true)
	return f, nil
}

// openDir opens a directory for openAt.
func openDir(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// openAt opens name in the directory dir (mode 0600 when created).
func openAt(dir int, name string, flag int) (*os.File, error) {
	fd, err := syscall.Openat(dir, name, flag|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func allocatedOf(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return allocated(fi)
}

// unlinked reports whether f's data file no longer has a name (another
// process evicted it).
func unlinked(f *os.File) bool {
	var st syscall.Stat_t
	return syscall.Fstat(int(f.Fd()), &st) == nil && st.Nlink == 0
}

// refLocked takes a reference on f. c.mu must be held.
func (c *Cache) refLocked(f *objFile) {
	f.refs++
	if f.idleEl != nil {
		c.idle.Remove(f.idleEl)
		f.idleEl = nil
	}
}

// drop forgets block idx of f, found corrupt while reading, and clears its
// record on disk (and the seal), so the next read fetches it again.
func (c *Cache) drop(f *objFile, idx int64) {
	c.st.corruptions.Add(1)
	c.log.Warn("block cache: checksum mismatch, refetching", "path", f.o.dataPath(), "block", idx)
	if f.blocks[idx].Swap(nil) == nil {
		return // someone else dropped it
	}
	f.have.Add(-1)
	f.seal.forget()
	a, err1 := os.Stat(f.o.idxPath())
	fi, err2 := f.idx.Stat()
	if err1 == nil && err2 == nil && os.SameFile(a, fi) {
		f.idx.WriteAt(make([]byte, f.o.recLen), f.o.recOff(idx))
		clearSeal(f.idx)
	}
}
