package block

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Prefetch warms the cache with the whole of ref, keeping up to one GET per
// fetch worker in flight at readahead priority (reads that wait go first).
// progress, when not nil, is called with the bytes cached so far after
// each block (from the goroutine calling Prefetch). It returns the first
// error: ctx's, a store error (wrapping objstore.ErrNotFound,
// ErrPrecondition, ...), or ErrClosed. An object larger than MaxBytes is
// still fetched, but its first blocks will have been evicted by the end.
func (c *Cache) Prefetch(ctx context.Context, ref Ref, progress func(done int64)) error {
	o := c.object(ref)
	if ref.Size > c.cfg.MaxBytes {
		c.log.Warn("block cache: prefetching an object larger than the cache", "key", ref.Key, "size", ref.Size, "max", c.cfg.MaxBytes)
	}
	return c.warm(ctx, o, prioReadahead, int64(c.nworkers)*c.partBlocks, o.nblocks, progress)
}

// refillAfter is how long after a background fill of an object completed
// random reads of it do not start another one (its blocks are there unless
// evicted since; a fill that finds them all present still walks them).
const refillAfter = 30 * time.Second

// maxFills bounds Cache.fills: done entries are forgotten when it is full.
const maxFills = 4096

// fillState is one object's entry in Cache.fills: a background fill
// running (stop set when it runs for open files only) or done at a time.
type fillState struct {
	at   time.Time          // when a fill completed; zero while one runs
	stop context.CancelFunc // a running fill's for open files only (startFill's open); nil when kept
}

// startFill warms o in the background at fill priority, once per object
// at a time (Config.FillRandomUpTo), and not again within refillAfter of
// a fill that completed. A fill for open files (open true: cold
// passthrough's readers, which start it once a process reads past
// fillAfter in order, so that the file is whole early) is stopped by
// stopFill when they all close, so that the rest of the object is not
// downloaded for nobody; random reads (open false) keep the fill running
// to the end, the one running too.
func (c *Cache) startFill(o *object, open bool) {
	c.mu.Lock()
	st, seen := c.fills[o.id]
	if c.closed || (seen && (st.at.IsZero() || time.Since(st.at) < refillAfter)) {
		if seen && st.at.IsZero() && !open && st.stop != nil {
			st.stop = nil // random reads keep the running fill
			c.fills[o.id] = st
		}
		c.mu.Unlock()
		return
	}
	if len(c.fills) >= maxFills {
		for id, st := range c.fills {
			if !st.at.IsZero() {
				delete(c.fills, id)
			}
		}
	}
	ctx, stop := context.WithCancel(c.ctx)
	st = fillState{}
	if open {
		st.stop = stop
	}
	c.fills[o.id] = st
	c.wg.Add(1)
	c.mu.Unlock()
	go func() { // owner: the Cache (Close cancels c.ctx and waits)
		defer c.wg.Done()
		defer stop()
		err := c.warm(ctx, o, prioFill, c.fillParts()*c.partBlocks, o.nblocks, nil)
		if err != nil && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
			c.log.Warn("block cache: background fill", "key", o.ref.Key, "err", err)
		}
		c.mu.Lock()
		if err == nil {
			c.fills[o.id] = fillState{at: time.Now()}
		} else {
			delete(c.fills, o.id)
		}
		c.mu.Unlock()
	}()
}

// stopFill stops o's background fill when it runs for open files only
// (startFill) and they are all closed; a fill random reads asked for goes
// on. What it fetched stays cached; its queued GETs are dropped.
func (c *Cache) stopFill(o *object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.fills[o.id]; ok && st.at.IsZero() && st.stop != nil {
		st.stop()
	}
}

// fillParts is how many GETs of PartSize a background fill keeps queued
// ahead: a quarter of the fetch workers (8 by default), at least 4. The
// random reads that started it miss until it is done, so it should finish
// soon; at the lowest priority it only takes workers no read is waiting
// for. (With 4 parts of 8 MiB, through 20 ms and 100 MB/s per connection,
// a 1 GiB fill took 3.4 s of a 10 s random-read run on 2 cores.)
func (c *Cache) fillParts() int64 { return max(4, int64(c.nworkers)/4) }

// warm fetches every missing block of o before block limit at priority
// p, keeping ahead blocks queued ahead of the one it waits for. It uses a
// Reader of its own as the owner of its queued fetches, so they are
// dropped when it returns.
func (c *Cache) warm(ctx context.Context, o *object, p prio, ahead, limit int64, progress func(int64)) error {
	r := &Reader{c: c, o: o}
	c.st.readers.Add(1)
	defer r.Close()
	limit = min(limit, o.nblocks)
	var done, queued int64
	for idx := range limit {
		if err := ctx.Err(); err != nil {
			return err
		}
		if queued-idx < ahead/2 && queued < limit {
			to := min(limit, idx+ahead)
			c.plan(o, queued, to, p, r)
			queued = to
		}
		if err := c.await(ctx, o, idx, p); err != nil {
			return err
		}
		done += o.blockLen(idx)
		if progress != nil {
			progress(done)
		}
	}
	return nil
}

// await returns once block idx of o is on disk, fetching it at priority p
// if nothing else is.
func (c *Cache) await(ctx context.Context, o *object, idx int64, p prio) error {
	attempts := 0
	for range maxRounds {
		if c.present(o, idx) {
			return nil
		}
		fl, present, _, err := c.ensureFlight(o, idx, idx+1, p)
		if err != nil {
			return err
		}
		if present {
			return nil
		}
		f, err := c.wait(ctx, fl)
		if f != nil {
			c.release(f)
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errDropped):
		case final(err) || attempts+1 >= maxAttempts:
			return err
		default:
			attempts++
		}
	}
	return fmt.Errorf("block: %s block %d: gave up after %d rounds", o.ref.Key, idx, maxRounds)
}
