package block

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// prio orders queued fetches: a read waiting now before readahead,
// readahead before directory readahead (predict.go), that before input
// staging (stage.go), staging before background fills.
type prio int

const (
	prioDemand prio = iota
	prioReadahead
	prioPredict
	prioStage
	prioFill
	nPrio
)

// errDropped completes the flights of a readahead fetch that was dropped
// (its Reader seeked away or closed while it was queued, or closed while
// its GET ran: abandoned); a waiter fetches again.
var errDropped = errors.New("block: readahead fetch dropped")

// warnEvery spaces out warnings about cache write failures.
const warnEvery = 10 * time.Second

// errCacheIO marks a failure to write the cache (disk full, I/O error):
// the read that needed the block then reads the store directly.
var errCacheIO = errors.New("block: cache write failed")

func cacheIOErr(err error) error { return fmt.Errorf("%w: %w", errCacheIO, err) }

// errShortBody is a body that ended before the promised length.
var errShortBody = errors.New("block: object body shorter than requested")

// flight is one block being fetched. Waiters block on done; err and f are
// written (under Cache.mu) before done is closed.
type flight struct {
	done chan struct{}
	err  error
	job  *job
	// waiters counts the callers of ensureFlight waiting for it (guarded by
	// Cache.mu). When the block lands, f is the file it landed in, with
	// one reference for each waiter (see wait): the file may be evicted
	// between the fetch and the waiter's read, as when an object larger
	// than the cache streams through it, and the waiter reads it anyway.
	waiters int
	f       *objFile
}

// wait waits for fl, which ensureFlight returned to the caller. It
// returns the fetch's error, or the file the block landed in with a
// reference the caller takes over (nil when the block was found present
// rather than fetched).
func (c *Cache) wait(ctx context.Context, fl *flight) (*objFile, error) {
	select {
	case <-fl.done:
		return fl.f, fl.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	select {
	case <-fl.done: // completed meanwhile: our reference was taken
		c.mu.Unlock()
		if fl.f != nil {
			c.release(fl.f)
		}
	default:
		fl.waiters--
		c.mu.Unlock()
	}
	return nil, ctx.Err()
}

// job is a fetch of blocks [first, end) of o (one ranged GET per run of
// missing blocks). prio, owner, flights and el are guarded by Cache.mu;
// first and end too while the job is queued, and by the worker running it
// after that.
type job struct {
	o          *object
	start      int64 // first block when created; flights[i] is block start+i
	first, end int64 // blocks still to fetch
	prio       prio
	owner      *Reader       // the Reader whose readahead queued it; nil once a read or Prefetch shares it
	flights    []*flight     // nil once completed
	el         *list.Element // while queued
}

// newJobLocked queues a fetch of blocks [first, end) of o, registering a
// flight for each. c.mu must be held and no block may be in flight.
func (c *Cache) newJobLocked(o *object, first, end int64, p prio, owner *Reader) *job {
	j := &job{o: o, start: first, first: first, end: end, prio: p, owner: owner, flights: make([]*flight, end-first)}
	for i := range j.flights {
		fl := &flight{done: make(chan struct{}), job: j}
		j.flights[i] = fl
		c.inflight[o.bid(first+int64(i))] = fl
	}
	j.el = c.queue[p].PushBack(j)
	c.signalLocked(j)
	return j
}

// planLocked queues fetches for the blocks of [from, to) that are neither
// cached nor in flight, in runs of at most partBlocks. c.mu must be held.
func (c *Cache) planLocked(o *object, from, to int64, p prio, owner *Reader) {
	run := int64(-1)
	flush := func(end int64) {
		if run >= 0 {
			c.newJobLocked(o, run, end, p, owner)
			run = -1
		}
	}
	for idx := from; idx < to; idx++ {
		if c.knownLocked(o, idx) {
			flush(idx)
			continue
		}
		if run < 0 {
			run = idx
		}
		if idx+1-run == c.partBlocks {
			flush(idx + 1)
		}
	}
	flush(to)
}

// knownLocked reports whether block idx of o is present in its open file
// or being fetched. c.mu must be held.
func (c *Cache) knownLocked(o *object, idx int64) bool {
	return c.openLocked(o, idx) || c.inflight[o.bid(idx)] != nil
}

// openLocked reports whether block idx of o is present in its open file.
// c.mu must be held.
func (c *Cache) openLocked(o *object, idx int64) bool {
	f := c.files[o.id]
	return f != nil && f.blocks[idx].Load() != nil
}

// plan is planLocked for callers without the lock.
func (c *Cache) plan(o *object, from, to int64, p prio, owner *Reader) {
	c.mu.Lock()
	if !c.closed {
		c.planLocked(o, from, to, p, owner)
	}
	c.mu.Unlock()
}

// ensureFlight returns the flight of block idx of o, starting a fetch of
// [idx, up to end) at priority p when none is running, or promoting a
// queued one. present is true when the block is already open in the cache;
// started is true when this call started the fetch (the block was neither
// cached nor on its way).
func (c *Cache) ensureFlight(o *object, idx, end int64, p prio) (fl *flight, present, started bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, false, ErrClosed
	}
	if c.openLocked(o, idx) {
		return nil, true, false, nil
	}
	if fl := c.inflight[o.bid(idx)]; fl != nil {
		fl.waiters++
		j := fl.job
		j.owner = nil
		if j.el != nil && p < j.prio {
			c.queue[j.prio].Remove(j.el)
			j.prio = p
			j.el = c.queue[p].PushBack(j)
		}
		return fl, false, false, nil
	}
	k := idx + 1
	for k < end && k-idx < c.partBlocks && !c.knownLocked(o, k) {
		k++
	}
	fl = c.newJobLocked(o, idx, k, p, nil).flights[0]
	fl.waiters++
	return fl, false, true, nil
}

// dropQueued drops the queued (not started) fetches r queued ahead of
// its reads: its readahead, or the staging or fill it ran.
func (c *Cache) dropQueued(r *Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := prioReadahead; p < nPrio; p++ {
		q := &c.queue[p]
		for e := q.Front(); e != nil; {
			next := e.Next()
			if j := e.Value.(*job); j.owner == r {
				q.Remove(e)
				j.el = nil
				c.failLocked(j, j.first, errDropped)
			}
			e = next
		}
	}
}

// completeLocked finishes the flight of block idx of job j: the block is
// in f by now (nil: found present on disk), unless err says why not. c.mu
// must be held.
func (c *Cache) completeLocked(j *job, idx int64, f *objFile, err error) {
	fl := j.flights[idx-j.start]
	if fl == nil {
		return
	}
	j.flights[idx-j.start] = nil
	if id := j.o.bid(idx); c.inflight[id] == fl {
		delete(c.inflight, id)
	}
	fl.err = err
	if err == nil && f != nil && fl.waiters > 0 {
		fl.f = f
		f.refs += fl.waiters
	}
	close(fl.done)
}

// failLocked completes the flights of blocks [from, j.end) with err. c.mu
// must be held.
func (c *Cache) failLocked(j *job, from int64, err error) {
	for idx := from; idx < j.end; idx++ {
		c.completeLocked(j, idx, nil, err)
	}
}

// complete is completeLocked for callers without the lock.
func (c *Cache) complete(j *job, idx int64, f *objFile, err error) {
	c.mu.Lock()
	c.completeLocked(j, idx, f, err)
	c.mu.Unlock()
}

// run fetches the missing blocks of j, one ranged GET per run of missing
// blocks, streaming each block into the object's file and completing its
// flight as soon as it is there.
func (c *Cache) run(j *job, buf []byte, crc *chunkCRC) {
	o := j.o
	c.mu.Lock()
	ahead := j.prio != prioDemand
	c.mu.Unlock()
	var claims []claim
	defer func() {
		for i := range claims {
			c.unclaim(&claims[i])
		}
	}()
	for j.first < j.end {
		if c.abandoned(j) {
			c.mu.Lock()
			c.failLocked(j, j.first, errDropped)
			c.mu.Unlock()
			return
		}
		// Blocks another process (or an earlier run) put on disk meanwhile.
		if c.present(o, j.first) {
			c.complete(j, j.first, nil, nil)
			j.first++
			continue
		}
		// Blocks another process is fetching now: wait for them (see
		// claim.go), then look again.
		cl, busy := c.claim(o, j.first)
		if busy {
			if !c.awaitOther(o, j.first) {
				continue
			}
			cl = claim{} // its holder is stuck: fetch it unclaimed
		}
		claims = append(claims[:0], cl)
		end := j.first + 1
		for end < j.end && !c.present(o, end) && !busy {
			if cl, busy = c.claim(o, end); busy {
				break
			}
			claims = append(claims, cl)
			end++
		}
		off := j.first * o.bs
		length := min(end*o.bs, o.ref.Size) - off
		c.st.fetches.Add(1)
		c.st.getsInFlight.Add(1)
		err := c.get(j, end, off, length, ahead, buf, crc, claims)
		c.st.getsInFlight.Add(-1)
		for i := range claims {
			c.unclaim(&claims[i])
		}
		if err != nil {
			c.warnFetch(o, off, length, err)
			c.mu.Lock()
			c.failLocked(j, j.first, err)
			c.mu.Unlock()
			return
		}
	}
}

// warnFetch logs a failed fetch; cache write failures (a full disk fails
// every fetch) at most once per warnEvery.
func (c *Cache) warnFetch(o *object, off, length int64, err error) {
	if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, ErrClosed) || errors.Is(err, errDropped) {
		return
	}
	if errors.Is(err, errCacheIO) {
		now, last := time.Now().UnixNano(), c.lastIOWarn.Load()
		if now-last < int64(warnEvery) || !c.lastIOWarn.CompareAndSwap(last, now) {
			return
		}
	}
	c.log.Warn("block cache: fetch failed", "key", o.ref.Key, "off", off, "len", length, "err", err)
}

// present reports whether block idx of o is in its file, looking at the
// disk when the open file does not know it.
func (c *Cache) present(o *object, idx int64) bool {
	f, _ := c.openObj(o, false)
	if f == nil {
		return false
	}
	ok := f.load(c, idx)
	c.release(f)
	return ok
}

// get fetches blocks [j.first, end) with one ranged GET of [off,
// off+length), advancing j.first as each block lands and dropping its
// claim (claims[i] is block j.first+i's, as get was called).
func (c *Cache) get(j *job, end, off, length int64, ahead bool, buf []byte, crc *chunkCRC, claims []claim) error {
	first := j.first
	o := j.o
	rd, err := o.ref.Store.NewReader(c.ctx, o.ref.Key, off, length, objstore.ReadOptions{IfVersion: o.ref.Version})
	if err != nil {
		return c.fetchErr(o, off, length, err)
	}
	defer rd.Close()
	if v := rd.Info().Version; v != "" && o.ref.Version != "" && v != o.ref.Version {
		return fmt.Errorf("block: %s changed (version %q, want %q): %w", o.ref.Key, v, o.ref.Version, objstore.ErrPrecondition)
	}
	var f *objFile
	defer func() {
		if f != nil {
			c.release(f)
		}
	}()
	for ; j.first < end; j.first++ {
		if j.first > first && c.abandoned(j) {
			return errDropped // what landed stays; the rest is for nobody
		}
		if f == nil || c.unmapped(f) {
			if f != nil {
				c.release(f)
				f = nil
			}
			if f, err = c.openObj(o, true); err != nil {
				return c.fetchErr(o, off, length, cacheIOErr(err))
			}
		}
		n, err := c.fetchBlock(f, j.first, rd, buf, crc)
		if err != nil {
			return c.fetchErr(o, off, length, err)
		}
		if ahead {
			c.st.prefetched.Add(n)
		}
		c.complete(j, j.first, f, nil)
		if i := j.first - first; i < int64(len(claims)) {
			c.unclaim(&claims[i])
		}
	}
	return nil
}

// abandoned reports whether nobody wants the rest of j any more: the
// Reader whose readahead, staging or fill queued it has closed (a close,
// or a fill stopped when its readers closed: stopFill), and no read
// shares it (a read that waits on one of its blocks clears j.owner). A
// GET of a part in flight then stops at the next block instead of
// downloading up to a part (8 MiB) per GET for nobody: a header read of
// each of a directory of files through readahead or the fill.
func (c *Cache) abandoned(j *job) bool {
	c.mu.Lock()
	r := j.owner
	c.mu.Unlock()
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// grow accounts n more allocated bytes in f's object.
func (c *Cache) grow(f *objFile, n int64) {
	c.mu.Lock()
	switch {
	case f.gone:
		f.ent.size += n
		c.orphaned += n
	case f.ent != nil && c.index[f.o.id] == f.ent:
		c.growLocked(f.ent, n)
	}
	c.mu.Unlock()
}

// unmapped reports whether f was evicted (or closed) since it was opened.
func (c *Cache) unmapped(f *objFile) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.files[f.o.id] != f
}

func (c *Cache) fetchErr(o *object, off, length int64, err error) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("block: read %s [%d, %d): %w", o.ref.Key, off, off+length, err)
}

// fetchBlock streams block idx from rd into f's data file at its own
// offset, then writes its record and publishes it, all chunks verified.
// It returns the block's length.
func (c *Cache) fetchBlock(f *objFile, idx int64, rd io.Reader, buf []byte, crc *chunkCRC) (int64, error) {
	o := f.o
	if !f.hdrOK.Load() {
		if _, err := f.idx.WriteAt(o.idxHeader(), 0); err != nil {
			c.kickEvictor()
			return 0, cacheIOErr(err)
		}
		if !f.hdrOK.Swap(true) {
			c.grow(f, idxHdrLen)
		}
	}
	n := o.blockLen(idx)
	base := idx * o.bs
	// Allocating the block's extent up front costs ext4 about 25% less CPU
	// than allocating it page by page as the writes land. KEEP_SIZE: the
	// file's size only grows by the writes, so a whole file is exactly
	// the object's size (a passthrough read stops there).
	if err := syscall.Fallocate(int(f.data.Fd()), fallocKeepSize, base, (n+pageSize-1)/pageSize*pageSize); errors.Is(err, syscall.ENOSPC) {
		c.kickEvictor()
		return 0, cacheIOErr(err)
	}
	crc.reset(o.chunk)
	for done := int64(0); done < n; {
		k := min(n-done, int64(len(buf)))
		m, err := io.ReadFull(rd, buf[:k])
		c.st.fetched.Add(int64(m))
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, errShortBody
		}
		if err != nil {
			return 0, err
		}
		crc.write(buf[:k])
		if _, err := f.data.WriteAt(buf[:k], base+done); err != nil {
			c.kickEvictor()
			return 0, cacheIOErr(err)
		}
		done += k
	}
	sums := crc.sums()
	m := &blockMeta{crcs: append([]uint32(nil), sums...)}
	m.verified.Store(allChunks(n, o.chunk))
	// Published here before its record is written, so that a look at the
	// disk in this process never finds the record first (it would publish
	// the block unverified); other processes see it with its record.
	f.setMeta(idx, m)
	c.grow(f, n)
	f.seal.wrote(f.data)
	if _, err := f.idx.WriteAt(o.record(idx, n, sums), o.recOff(idx)); err != nil {
		c.kickEvictor()
		return 0, cacheIOErr(err)
	}
	if f.have.Load() == o.nblocks {
		c.sealIfVerified(f)
	}
	f.touch()
	return n, nil
}

// fallocKeepSize is FALLOC_FL_KEEP_SIZE (the syscall package lacks it).
const fallocKeepSize = 0x1
