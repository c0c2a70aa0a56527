package block

import (
	"os"
	"sync/atomic"
)

// Blocks another process fetches while this one watches.
//
// A block this process fetched starts verified: its CRCs were computed on
// the bytes on their way into the file. A block another process wrote is
// checked chunk by chunk before this process lets the kernel or a FUSE
// read serve it, since the record may be older than the bytes under it (a
// crash before the data reached the disk) or the bytes may have been
// damaged since. Tasks on one node reading one reference, a ferry each,
// then each read the whole file once more to check it: a quarter of each
// ferry's CPU while they fill it (perf, 2026-12-03).
//
// Both hazards need an old record. When this process has itself found a
// block's record absent, a record it finds later was written after that,
// in this boot (this process is alive), by a fetch (or a copy) that
// checksummed the bytes in memory and wrote them before the record: the
// page cache holds what the CRCs describe, unless something has written
// to the file since, below ferry's claims, within seconds. Such a block
// is taken as verified ("fresh"), except where the file has a hole in
// its range (a punched or never written block under a record is always
// checked, so its zeros are never served). What remains unchecked is
// damage in the seconds between another process's fetch and this one's
// read that no change of the file's stamp reveals either: the class a
// seal already leaves unchecked (README.md, Integrity).

// newObjFile is an open pair of o's files, no block known yet.
func newObjFile(o *object, data, idx *os.File) *objFile {
	return &objFile{o: o, data: data, idx: idx,
		blocks:     make([]atomic.Pointer[blockMeta], o.nblocks),
		seenAbsent: make([]atomic.Uint64, (o.nblocks+63)/64)}
}

// markAbsent notes that this process found block idx's record absent.
func (f *objFile) markAbsent(idx int64) {
	if idx >= 0 && idx < f.o.nblocks {
		f.seenAbsent[idx/64].Or(1 << (idx % 64))
	}
}

// fresh reports whether block idx, whose record was just found valid, may
// be taken as verified: this process found its record absent before, and
// its range of the data file has no hole.
func (f *objFile) fresh(idx int64) bool {
	if idx < 0 || idx >= f.o.nblocks || f.seenAbsent[idx/64].Load()&(1<<(idx%64)) == 0 {
		return false
	}
	start, n := idx*f.o.bs, f.o.blockLen(idx)
	hole, err := seekHole(f.data, start)
	return err == nil && hole >= start+n
}

// seekHole returns the offset of the first hole at or after off in f
// (the file's size when there is none before it).
func seekHole(f *os.File, off int64) (int64, error) {
	const seekHoleWhence = 4 // SEEK_HOLE
	rc, err := f.Seek(off, seekHoleWhence)
	return rc, err
}
