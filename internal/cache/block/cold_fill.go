package block

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// fillEvery: Ready asks for the background fill (Cache.startFill, which
// takes the cache's lock) at most this often per file: every read of a
// file that is not whole raises an event, tens of thousands a second. A
// fill that failed is asked for again on a later event.
const fillEvery = 250 * time.Millisecond

// fillAfter: Ready asks for the background fill once a reading process
// has read more than this in order (random reads ask for it at once,
// Reader.observe), so a header read (head, samtools view -H, file) fetches
// its readahead and not the whole object. Starting at the second 1 MiB
// read cost cold sequential reads nothing measurable (746 against 746
// MiB/s, 6 runs each alternating, 2026-12-06); at 4 MiB it cost 3 %.
const fillAfter = 1 << 20

// The Filler side of a coldFile (hsm.Filler): the listener calls Ready on
// every event, in order, and Fill, in a goroutine of its own, for a range
// Ready did not find present.

// span clips the event range [off, off+n) to the object and returns it
// with its first and last block; ok is false when nothing of it is in
// the object.
func (cf *coldFile) span(off, n int64) (lo, hi, first, last int64, ok bool) {
	o := cf.f.o
	size := o.ref.Size
	if off < 0 || off >= size || n <= 0 {
		return 0, 0, 0, 0, false
	}
	lo, hi = off, size
	if n < size-off {
		hi = off + n
	}
	return lo, hi, lo / o.bs, (hi - 1) / o.bs, true
}

// Ready reports whether every block of the range is present in cf's file
// and verified by this process, without I/O. It feeds the read to the
// reading process's readahead first.
func (cf *coldFile) Ready(off, n int64, pid int32) bool {
	lo, hi, first, last, ok := cf.span(off, n)
	if !ok {
		return true // past the end: the kernel reads nothing there
	}
	f, o, c := cf.f, cf.f.o, cf.c
	fillable := c.cfg.FillRandomUpTo > 0 && o.ref.Size <= c.cfg.FillRandomUpTo
	streaming := false
	if cr := cf.reader(pid); cr != nil {
		cr.rd.observe(lo, hi-lo)
		streaming = fillable && cr.rd.streamed() > fillAfter
		cf.done(cr)
	}
	// Every read of a file that is not whole costs an event (about 25 µs:
	// 4 KiB sequential reads ran at 41k/s against 89k/s through ferry,
	// 2026-12-01), so the whole file is fetched in the background once a
	// process reads it in order past fillAfter (random reads start that
	// fill for any file, Config.FillRandomUpTo), below the readers' own
	// fetches: the sooner it is whole, the sooner its reads cost nothing.
	// When its readers all close, that fill stops (coldRelease).
	if streaming {
		if now, at := time.Now().UnixNano(), cf.fillAt.Load(); now-at >= int64(fillEvery) && cf.fillAt.CompareAndSwap(at, now) {
			c.startFill(o, true)
		}
	}
	for idx := first; idx <= last; idx++ {
		m := f.blocks[idx].Load()
		if m == nil {
			return false
		}
		bl, bh := max(lo, idx*o.bs)-idx*o.bs, min(hi, idx*o.bs+o.blockLen(idx))-idx*o.bs
		mask := chunkMask(bl, bh, o.chunk)
		if m.verified.Load()&mask != mask {
			return false
		}
	}
	c.st.hits.Add(1)
	c.st.bytesCache.Add(hi - lo)
	c.stageRead(o.ref, lo, hi-lo, waitNone)
	cf.checkWhole()
	return true
}

// chunkMask is the verified mask of the chunks holding block offsets
// [lo, hi).
func chunkMask(lo, hi, chunk int64) uint64 {
	first, last := lo/chunk, (hi-1)/chunk
	return (^uint64(0) >> (63 - last)) &^ (1<<first - 1)
}

// Fill makes every block of the range present and verified in cf's file:
// fetched (or waited for, when this process or another is fetching it),
// checked against its record, and copied in when it landed in a newer
// file of the object. An error (after the Reader's retries) makes the
// read fail with EIO; it is logged by the fetch that failed.
func (cf *coldFile) Fill(ctx context.Context, off, n int64, pid int32) error {
	lo, hi, first, last, ok := cf.span(off, n)
	if !ok {
		return nil
	}
	c, o := cf.c, cf.f.o
	cr := cf.reader(pid)
	if cr == nil {
		return ErrClosed
	}
	defer cf.done(cr)
	rd := cr.rd
	waited := false
	for idx := first; idx <= last; idx++ {
		bl, bh := max(lo, idx*o.bs)-idx*o.bs, min(hi, idx*o.bs+o.blockLen(idx))-idx*o.bs
		w, err := cf.fillBlock(ctx, rd, idx, last+1, bl, bh)
		if err != nil {
			return err
		}
		waited = waited || w != waitNone
		c.stageRead(o.ref, idx*o.bs+bl, bh-bl, w)
	}
	if waited {
		c.st.misses.Add(1)
		c.st.bytesNet.Add(hi - lo)
	} else {
		c.st.hits.Add(1)
		c.st.bytesCache.Add(hi - lo)
	}
	cf.checkWhole()
	return nil
}

// fillBlock makes block idx present in cf's file with chunks [bl, bh)
// (offsets in the block) verified.
func (cf *coldFile) fillBlock(ctx context.Context, rd *Reader, idx, end, bl, bh int64) (waitKind, error) {
	c := cf.c
	corrupt := 0
	var waited waitKind
	for range maxRounds {
		if cf.f.load(c, idx) {
			err := cf.f.check(c, idx, nil, bl, bh-bl)
			if err == nil {
				return waited, nil
			}
			if !errors.Is(err, errCorrupt) || corrupt >= maxAttempts {
				return waited, fmt.Errorf("block: cache read %s: %w", cf.f.o.ref.Key, err)
			}
			corrupt++
			c.drop(cf.f, idx)
			continue
		}
		h, w, err := rd.block(ctx, idx, end)
		if w > waited {
			waited = w
		}
		if err != nil {
			return waited, err
		}
		if h.f != cf.f {
			// The block landed in a newer file of the object (cf's was
			// evicted, or a direct read went around the cache): copy it in.
			err = cf.copyIn(h.f, idx)
		}
		rd.unpin(h)
		if err != nil {
			return waited, err
		}
	}
	return waited, fmt.Errorf("block: %s block %d: gave up after %d rounds", cf.f.o.ref.Key, idx, maxRounds)
}

// copyIn copies block idx from src (another file of the same object,
// where it is present) into cf's file and publishes it there, verified.
func (cf *coldFile) copyIn(src *objFile, idx int64) error {
	c, o := cf.c, cf.f.o
	n := o.blockLen(idx)
	buf := make([]byte, n)
	if err := src.read(c, idx, buf, 0); err != nil {
		if errors.Is(err, errCorrupt) {
			c.drop(src, idx)
			return nil // fetched again by the next round
		}
		return err
	}
	if _, err := cf.f.data.WriteAt(buf, idx*o.bs); err != nil {
		return cacheIOErr(err)
	}
	var crc chunkCRC
	crc.reset(o.chunk)
	crc.write(buf)
	sums := crc.sums()
	m := &blockMeta{crcs: append([]uint32(nil), sums...)}
	m.verified.Store(allChunks(n, o.chunk))
	cf.f.setMeta(idx, m)
	cf.f.seal.wrote(cf.f.data)
	cf.f.idx.WriteAt(o.record(idx, n, sums), o.recOff(idx))
	return nil
}

// coldReader is the readahead state of one reading process.
type coldReader struct {
	rd   *Reader
	pid  int32
	uses int // events using it now (guarded by coldFile.mu)
}

// reader returns the readahead state of process pid, in use until done
// (made on first use; beyond coldReaders, the least recently used one
// not in use is closed), or nil once cf is dropped.
func (cf *coldFile) reader(pid int32) *coldReader {
	cf.mu.Lock()
	if cf.dropped {
		cf.mu.Unlock()
		return nil
	}
	cr := cf.readers[pid]
	if cr == nil {
		cr = &coldReader{rd: cf.c.Open(cf.f.o.ref), pid: pid}
		cf.readers[pid] = cr
	} else {
		cf.order = slices.DeleteFunc(cf.order, func(p int32) bool { return p == pid })
	}
	cf.order = append(cf.order, pid)
	cr.uses++
	var old []*Reader
	for i := 0; len(cf.readers) > coldReaders && i < len(cf.order); {
		o := cf.readers[cf.order[i]]
		if o.uses > 0 {
			i++
			continue
		}
		delete(cf.readers, o.pid)
		cf.order = slices.Delete(cf.order, i, i+1)
		old = append(old, o.rd)
	}
	cf.mu.Unlock()
	for _, rd := range old {
		rd.Close()
	}
	return cr
}

// done ends an event's use of cr.
func (cf *coldFile) done(cr *coldReader) {
	cf.mu.Lock()
	cr.uses--
	cf.mu.Unlock()
}

// checkWhole ends cf's events once its file is whole and verified: at
// once when this process verified every block, else after a check in the
// background (a seal another process wrote, or a check of the chunks
// this process has not verified: verifyRest).
func (cf *coldFile) checkWhole() {
	c, f := cf.c, cf.f
	if f.have.Load() != f.o.nblocks {
		return
	}
	cf.mu.Lock()
	if cf.whole || cf.checks || cf.dropped {
		cf.mu.Unlock()
		return
	}
	cf.checks = true
	cf.mu.Unlock()
	if f.allVerified() {
		c.sealIfVerified(f)
		cf.setWhole(true)
		return
	}
	c.wg.Add(1)
	go func() { // owner: the Cache (Close waits for it)
		defer c.wg.Done()
		cf.setWhole(c.verifyRest(f))
	}()
}

// isWhole reports whether cf's file is known whole and verified.
func (cf *coldFile) isWhole() bool {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return cf.whole
}

// setWhole records the outcome of a wholeness check.
func (cf *coldFile) setWhole(ok bool) {
	cf.mu.Lock()
	cf.checks = false
	if !ok || cf.dropped {
		cf.mu.Unlock()
		return
	}
	cf.whole = true
	idle := cf.refs == 0
	cf.mu.Unlock()
	if err := cf.w.Whole(); err != nil {
		cf.c.log.Debug("block cache: ending the events of a whole file", "path", cf.f.o.dataPath(), "err", err)
	}
	if idle {
		cf.c.coldDrop(cf, false)
	}
}
