package block

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// Fetch claims across processes. Processes that share Dir (one ferry per
// task on one cache directory, the Nextflow model) would each GET the
// same blocks when their tasks read a shared reference at the same time:
// four tasks reading a 2 GiB reference downloaded 8 GiB. So before a
// worker fetches a block it takes an OFD write lock (fcntl F_OFD_SETLK)
// on the block's record range in its segment file, and drops it once the
// block is published. A worker of another process that finds the lock
// taken does not fetch: it waits until the block is present, or until the
// lock is free without it (the fetch failed, or its process died: the
// kernel drops the locks of a file description when it is closed), and
// then fetches it itself. Within a process the inflight map deduplicates;
// the locks of one file description never conflict with each other.
//
// The wait polls (backing off from 1 to 8 ms) rather than blocking in
// F_OFD_SETLKW, so that Close never waits on another process's fetch.

// fOFDSetLK is F_OFD_SETLK (Linux 3.15+); the syscall package lacks it.
const fOFDSetLK = 37

// claimWaitMax bounds the poll interval of a worker waiting for another
// process's fetch.
const claimWaitMax = 8 * time.Millisecond

// claim is a held lock on block b of sf (sf referenced), or the zero
// claim when none was taken.
type claim struct {
	sf *segFile
	b  int64
}

// lockRange takes (typ F_WRLCK) or drops (F_UNLCK) the lock of slot b.
func lockRange(sf *segFile, b int64, typ int16) error {
	lk := syscall.Flock_t{Type: typ, Whence: io.SeekStart, Start: sf.o.recOff(b), Len: sf.o.recLen}
	return syscall.FcntlFlock(sf.f.Fd(), fOFDSetLK, &lk)
}

// claim tries to claim block idx of o for a fetch by this process. busy
// is true when another process holds it. Without a claim (a cache file
// that cannot be created, a file system without OFD locks) the fetch goes
// on unclaimed, as before locks existed.
func (c *Cache) claim(o *object, idx int64) (cl claim, busy bool) {
	if c.noClaims.Load() {
		return claim{}, false
	}
	sf, err := c.openSeg(o, idx/o.segBlocks, true)
	if err != nil {
		return claim{}, false // the fetch reports the cache error
	}
	b := idx % o.segBlocks
	err = lockRange(sf, b, syscall.F_WRLCK)
	switch {
	case err == nil:
		return claim{sf: sf, b: b}, false
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES):
		c.release(sf)
		return claim{}, true
	default:
		c.release(sf)
		if !c.noClaims.Swap(true) {
			c.log.Warn("block cache: no fetch locks on this file system; processes sharing the cache may fetch the same blocks", "err", err)
		}
		return claim{}, false
	}
}

// unclaim releases a claim (a no-op for the zero claim).
func (c *Cache) unclaim(cl *claim) {
	if cl.sf == nil {
		return
	}
	_ = lockRange(cl.sf, cl.b, syscall.F_UNLCK)
	c.release(cl.sf)
	cl.sf = nil
}

// awaitOther waits while another process fetches block idx of o: until
// the block is present, its claim is free, or the cache closes.
func (c *Cache) awaitOther(o *object, idx int64) {
	c.st.claimWaits.Add(1)
	wait := time.Millisecond
	for {
		if c.present(o, idx) || c.ctx.Err() != nil {
			return
		}
		cl, busy := c.claim(o, idx)
		c.unclaim(&cl)
		if !busy {
			return
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, claimWaitMax)
	}
}
