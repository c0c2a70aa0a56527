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
// on the block's record range in its object's index file, and drops it once the
// block is published. A worker of another process that finds the lock
// taken does not fetch: it waits until the block is present, or until the
// lock is free without it (the fetch failed, or its process died: the
// kernel drops the locks of a file description when it is closed), and
// then fetches it itself. Within a process the inflight map deduplicates;
// the locks of one file description never conflict with each other.
//
// The wait polls (backing off from 1 to 8 ms) rather than blocking in
// F_OFD_SETLKW, so that Close never waits on another process's fetch.

// fOFDSetLK and fOFDSetLKW are F_OFD_SETLK and F_OFD_SETLKW (Linux
// 3.15+); the syscall package lacks them.
const (
	fOFDSetLK  = 37
	fOFDSetLKW = 38
)

// claimWaitMax bounds the poll interval of a worker waiting for another
// process's fetch.
const claimWaitMax = 8 * time.Millisecond

// claim is a held lock on block idx of f (f referenced), or the zero
// claim when none was taken.
type claim struct {
	f   *objFile
	idx int64
}

// lockRange takes (typ F_WRLCK) or drops (F_UNLCK) the lock of block idx.
func lockRange(f *objFile, idx int64, typ int16) error {
	lk := syscall.Flock_t{Type: typ, Whence: io.SeekStart, Start: f.o.recOff(idx), Len: f.o.recLen}
	return syscall.FcntlFlock(f.idx.Fd(), fOFDSetLK, &lk)
}

// claim tries to claim block idx of o for a fetch by this process. busy
// is true when another process holds it. Without a claim (a cache file
// that cannot be created, a file system without OFD locks) the fetch goes
// on unclaimed, as before locks existed.
func (c *Cache) claim(o *object, idx int64) (cl claim, busy bool) {
	if c.noClaims.Load() {
		return claim{}, false
	}
	f, err := c.openObj(o, true)
	if err != nil {
		return claim{}, false // the fetch reports the cache error
	}
	err = lockRange(f, idx, syscall.F_WRLCK)
	switch {
	case err == nil:
		return claim{f: f, idx: idx}, false
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES):
		c.release(f)
		return claim{}, true
	default:
		c.release(f)
		if !c.noClaims.Swap(true) {
			c.log.Warn("block cache: no fetch locks on this file system; processes sharing the cache may fetch the same blocks", "err", err)
		}
		return claim{}, false
	}
}

// unclaim releases a claim (a no-op for the zero claim).
func (c *Cache) unclaim(cl *claim) {
	if cl.f == nil {
		return
	}
	_ = lockRange(cl.f, cl.idx, syscall.F_UNLCK)
	c.release(cl.f)
	cl.f = nil
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
