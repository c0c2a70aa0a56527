package block

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// prio orders queued fetches: a read waiting now before readahead, and
// readahead before background fills.
type prio int

const (
	prioDemand prio = iota
	prioReadahead
	prioFill
	nPrio
)

// errDropped completes the flights of a queued readahead fetch that was
// dropped (its Reader seeked away or closed); a waiter fetches again.
var errDropped = errors.New("block: readahead fetch dropped")

// errShortBody is a body that ended before the promised length.
var errShortBody = errors.New("block: object body shorter than requested")

// flight is one block being fetched. Waiters block on done; err is written
// (under Cache.mu) before done is closed.
type flight struct {
	done chan struct{}
	err  error
	job  *job
}

// job is one ranged GET of blocks [first, end) of o. Its fields are
// guarded by Cache.mu.
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
	c.cond.Signal()
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
		id := o.bid(idx)
		if c.files[id] != nil || c.index[id] != nil || c.inflight[id] != nil {
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
// queued one. present is true when the block is already open in the cache.
func (c *Cache) ensureFlight(o *object, idx, end int64, p prio) (fl *flight, present bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, ErrClosed
	}
	id := o.bid(idx)
	if c.files[id] != nil {
		return nil, true, nil
	}
	if fl := c.inflight[id]; fl != nil {
		j := fl.job
		j.owner = nil
		if j.el != nil && p < j.prio {
			c.queue[j.prio].Remove(j.el)
			j.prio = p
			j.el = c.queue[p].PushBack(j)
		}
		return fl, false, nil
	}
	k := idx + 1
	for k < end && k-idx < c.partBlocks {
		kid := o.bid(k)
		if c.files[kid] != nil || c.inflight[kid] != nil {
			break
		}
		k++
	}
	return c.newJobLocked(o, idx, k, p, nil).flights[0], false, nil
}

// dropQueued drops the queued (not started) readahead fetches of r.
func (c *Cache) dropQueued(r *Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := &c.queue[prioReadahead]
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

// completeLocked finishes the flight of block idx of job j: bf (the fetched
// block, refs 0) is published, or err handed to the waiters. c.mu must be
// held.
func (c *Cache) completeLocked(j *job, idx int64, bf *blockFile, err error) []*os.File {
	fl := j.flights[idx-j.start]
	if fl == nil {
		return nil
	}
	j.flights[idx-j.start] = nil
	id := j.o.bid(idx)
	var toClose []*os.File
	if bf != nil {
		if c.closed {
			toClose = append(toClose, bf.f)
		} else {
			if old := c.files[id]; old != nil && old.refs == 0 {
				if old.idleEl != nil {
					c.idle.Remove(old.idleEl)
					old.idleEl = nil
				}
				toClose = append(toClose, old.f)
			}
			bf.ent = c.indexAddLocked(id, bf.n+trailerLen(bf.n, bf.chunk), true)
			c.files[id] = bf
			toClose = c.idleLocked(bf, toClose)
		}
	}
	if c.inflight[id] == fl {
		delete(c.inflight, id)
	}
	fl.err = err
	close(fl.done)
	return toClose
}

// failLocked completes the flights of blocks [from, j.end) with err. c.mu
// must be held.
func (c *Cache) failLocked(j *job, from int64, err error) {
	for idx := from; idx < j.end; idx++ {
		c.completeLocked(j, idx, nil, err)
	}
}

// complete is completeLocked for callers without the lock.
func (c *Cache) complete(j *job, idx int64, bf *blockFile, err error) {
	c.mu.Lock()
	toClose := c.completeLocked(j, idx, bf, err)
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
}

// worker runs queued fetches until Close. It owns one bufSize buffer.
func (c *Cache) worker() {
	defer c.wg.Done()
	var buf []byte
	var crc chunkCRC
	for {
		c.mu.Lock()
		var j *job
		for j == nil {
			if c.closed {
				c.mu.Unlock()
				return
			}
			for p := range c.queue {
				if e := c.queue[p].Front(); e != nil {
					j = c.queue[p].Remove(e).(*job)
					j.el = nil
					break
				}
			}
			if j == nil {
				c.cond.Wait()
			}
		}
		c.mu.Unlock()
		if buf == nil {
			buf = make([]byte, bufSize)
			c.st.memInUse.Add(bufSize)
		}
		c.run(j, buf, &crc)
	}
}

// run fetches the blocks of j with one ranged GET, streaming each block to
// its file and publishing it as soon as it is complete.
func (c *Cache) run(j *job, buf []byte, crc *chunkCRC) {
	o := j.o
	// Blocks another process (or the startup scan) put on disk meanwhile.
	for j.first < j.end && c.onDisk(o, j.first) {
		c.complete(j, j.first, nil, nil)
		j.first++
	}
	for j.end > j.first && c.onDisk(o, j.end-1) {
		c.complete(j, j.end-1, nil, nil)
		j.end--
	}
	if j.first == j.end {
		return
	}
	off := j.first * o.bs
	length := min(j.end*o.bs, o.ref.Size) - off
	c.st.fetches.Add(1)
	c.st.getsInFlight.Add(1)
	defer c.st.getsInFlight.Add(-1)
	c.mu.Lock()
	ahead := j.prio != prioDemand
	c.mu.Unlock()
	err := c.get(j, off, length, ahead, buf, crc)
	if err != nil {
		if !errors.Is(err, objstore.ErrPrecondition) && !errors.Is(err, ErrClosed) && c.ctx.Err() == nil {
			c.log.Warn("block cache: fetch failed", "key", o.ref.Key, "off", off, "len", length, "err", err)
		}
		c.mu.Lock()
		c.failLocked(j, j.first, err)
		c.mu.Unlock()
	}
}

func (c *Cache) get(j *job, off, length int64, ahead bool, buf []byte, crc *chunkCRC) error {
	o := j.o
	rd, err := o.ref.Store.NewReader(c.ctx, o.ref.Key, off, length, objstore.ReadOptions{IfVersion: o.ref.Version})
	if err != nil {
		return c.fetchErr(o, off, length, err)
	}
	defer rd.Close()
	if v := rd.Info().Version; v != "" && o.ref.Version != "" && v != o.ref.Version {
		return fmt.Errorf("block: %s changed (version %q, want %q): %w", o.ref.Key, v, o.ref.Version, objstore.ErrPrecondition)
	}
	for j.first < j.end {
		bf, err := c.fetchBlock(o, j.first, rd, buf, crc)
		if err != nil {
			return c.fetchErr(o, off, length, err)
		}
		if ahead {
			c.st.prefetched.Add(bf.n)
		}
		c.complete(j, j.first, bf, nil)
		j.first++
	}
	return nil
}

func (c *Cache) fetchErr(o *object, off, length int64, err error) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	return fmt.Errorf("block: read %s [%d, %d): %w", o.ref.Key, off, off+length, err)
}

// fetchBlock streams block idx of o from rd into a temporary file, renames
// it into place and returns it open, all chunks verified.
func (c *Cache) fetchBlock(o *object, idx int64, rd io.Reader, buf []byte, crc *chunkCRC) (*blockFile, error) {
	f, err := os.CreateTemp(o.dir, tmpPrefix+"*")
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(o.dir, 0o700); err == nil {
			f, err = os.CreateTemp(o.dir, tmpPrefix+"*")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cache file: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	n := o.blockLen(idx)
	crc.reset(o.chunk)
	for done := int64(0); done < n; {
		k := min(n-done, int64(len(buf)))
		m, err := io.ReadFull(rd, buf[:k])
		c.st.fetched.Add(int64(m))
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errShortBody
		}
		if err != nil {
			return nil, err
		}
		crc.write(buf[:k])
		if _, err := f.Write(buf[:k]); err != nil {
			c.kickEvictor()
			return nil, fmt.Errorf("cache file: %w", err)
		}
		done += k
	}
	sums := crc.sums()
	var tb [trailerHead + 4*maxChunks + 4]byte
	if _, err := f.Write(appendTrailer(tb[:0], o.bid(idx), n, o.chunk, sums)); err != nil {
		c.kickEvictor()
		return nil, fmt.Errorf("cache file: %w", err)
	}
	path := o.path(idx)
	if err := os.Rename(f.Name(), path); err != nil {
		return nil, fmt.Errorf("cache file: %w", err)
	}
	ok = true
	bf := &blockFile{id: o.bid(idx), path: path, f: f, n: n, chunk: o.chunk, crcs: append([]uint32(nil), sums...)}
	bf.verified.Store(allChunks(n, o.chunk))
	return bf, nil
}
