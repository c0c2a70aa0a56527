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
// The wait sleeps on the index file's inotify events (claimwake.go) and
// polls, rather than blocking in F_OFD_SETLKW, so that Close never waits
// on another process's fetch. It
// gives up after claimWaitLimit: a process that holds a claim without
// making the block present in that time (frozen: SIGSTOP, a frozen
// cgroup; or stuck on its network) no longer holds up this one, which
// then fetches the block itself, unclaimed (both write the same bytes).

// fOFDSetLK and fOFDSetLKW are F_OFD_SETLK and F_OFD_SETLKW (Linux
// 3.15+); the syscall package lacks them.
const (
	fOFDSetLK  = 37
	fOFDSetLKW = 38
)

// claimWaitMax bounds the poll interval of a worker waiting for another
// process's fetch.
var claimWaitMax = 8 * time.Millisecond

// claimWaitLimit bounds the wait for one block another process claimed
// (a block of 1 MiB in a GET of 8 takes well under a second on a working
// connection).
var claimWaitLimit = 5 * time.Second

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

// stuckOn reports whether a wait for a claim of o gave up within the
// last claimWaitLimit: later claims of o (the rest of a stuck process's
// GET) are then not waited for.
func (c *Cache) stuckOn(o *object) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.stuck[o.id]
	if ok && time.Since(at) > claimWaitLimit {
		delete(c.stuck, o.id)
		return false
	}
	return ok
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
// the block is present, its claim is free, or the cache closes; or, after
// claimWaitLimit, it gives up (timedOut) and the caller fetches the block
// unclaimed. It sleeps on o's index file (claimwake.go), polling as well.
func (c *Cache) awaitOther(o *object, idx int64) (timedOut bool) {
	c.st.claimWaits.Add(1)
	ww := c.wakeOn(o)
	defer c.unwake(ww)
	wait, most := time.Millisecond, claimWaitMax
	if ww != nil {
		wait, most = claimWaitMax, 8*claimWaitMax // woken by the writes: the poll only finds failed fetches
	}
	deadline := time.Now().Add(claimWaitLimit)
	if c.stuckOn(o) {
		deadline = time.Now() // gave up on this object's claims just now
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	probe, probed := true, uint64(0) // try the claim: first, after a close, when the timer fires
	for {
		changed, closes := ww.changed(&c.waker) // before looking: a record written after the look wakes this wait
		if c.present(o, idx) || c.ctx.Err() != nil {
			return false
		}
		if probe || closes != probed {
			probe, probed = false, closes
			cl, busy := c.claim(o, idx)
			c.unclaim(&cl)
			if !busy {
				return false
			}
		}
		if !time.Now().Before(deadline) {
			if !c.stuckOn(o) {
				c.log.Warn("block cache: another process sharing the cache holds blocks it does not fetch (frozen?); fetching them here too", "key", o.ref.Key, "block", idx)
			}
			c.mu.Lock()
			c.stuck[o.id] = time.Now()
			c.mu.Unlock()
			return true
		}
		t.Reset(min(wait, time.Until(deadline)))
		select {
		case <-c.ctx.Done():
			return false
		case <-changed:
		case <-t.C:
			wait = min(2*wait, most)
			probe = true
		}
	}
}
