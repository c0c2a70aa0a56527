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
// its range where noHoleAt looks (a punched or never written block
// under a record is always checked, so its zeros are never served). What
// remains unchecked is damage in the seconds between another process's fetch and this one's
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
// its range of the data file has no hole where noHoleAt looks.
func (f *objFile) fresh(idx int64) bool {
	if idx < 0 || idx >= f.o.nblocks || f.seenAbsent[idx/64].Load()&(1<<(idx%64)) == 0 {
		return false
	}
	return noHoleAt(f.data, idx*f.o.bs, f.o.blockLen(idx))
}

// noHoleAt reports whether the first and the last page of [start,
// start+n) hold data (SEEK_DATA finds them where they are). It does not
// scan the range: SEEK_HOLE from start would, as far as the first hole,
// which in a file being filled lies at the fill's front, hundreds of MiB
// ahead; with a ferry per task each look of a block cost the pages of
// all that lay before the front (2026-12-04, 8 tasks: 7 % of the
// ferries' CPU while they filled one reference; a probe at every 64 KiB
// chunk cost as much again). A whole block that is not there (never
// written, punched, cut by a truncate) is found; a hole between the two
// pages is not.
func noHoleAt(f *os.File, start, n int64) bool {
	last := (start + n - 1) &^ (pageSize - 1)
	for _, off := range [2]int64{start, last} {
		if got, err := seekData(f, off); err != nil || got != off {
			return false
		}
	}
	return true
}

// seekData returns the offset of the first data at or after off in f
// (ENXIO when there is none before the file's end).
func seekData(f *os.File, off int64) (int64, error) {
	const seekDataWhence = 3 // SEEK_DATA
	return f.Seek(off, seekDataWhence)
}
