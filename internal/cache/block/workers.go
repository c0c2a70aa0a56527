package block

// Fetch workers. Cache.nworkers workers (the download budget) take any
// queued job, highest priority first. Beside them run as many small
// workers, which take only jobs of small objects (at most smallObject
// bytes) that a task waits for, reads ahead or that directory readahead
// predicted: a tree of small files is fetched at the rate of GETs in
// flight, and each of those GETs costs one round trip and little
// bandwidth, so they get room of their own instead of queueing behind
// the budget that ranged GETs of large objects share (xargs -P 8 cat of
// 10,000 x 4 KiB behind +20 ms: 32 GETs in flight 15-19 s, 64 13-14 s).

// smallObject is the size up to which an object's fetches may run on
// the small workers.
const smallObject = 256 << 10

// smallScan bounds the queued jobs a small worker looks at per queue.
const smallScan = 64

// isSmallObject reports whether an object of size bytes is small.
func isSmallObject(size int64) bool { return size <= smallObject }

// isSmall reports whether j may run on a small worker.
func (j *job) isSmall() bool { return isSmallObject(j.o.ref.Size) && j.prio <= prioPredict }

// signalLocked wakes a worker for the job j just queued: an idle small
// worker when j may run on one (the budget's workers stay free for the
// rest), else a budget worker. c.mu must be held.
func (c *Cache) signalLocked(j *job) {
	if c.smallIdle > 0 && j.isSmall() {
		c.smallIdle--
		c.smallCond.Signal()
		return
	}
	c.cond.Signal()
}

// worker runs queued fetches until Close. It owns one bufSize buffer.
// A small worker takes only the jobs isSmall allows.
func (c *Cache) worker(small bool) {
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
			if small {
				j = c.takeSmallLocked()
			} else {
				j = c.takeLocked()
			}
			if j != nil {
				break
			}
			if small {
				c.smallIdle++
				c.smallCond.Wait()
			} else {
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

// takeLocked dequeues the first job of the highest priority, or nil.
// c.mu must be held.
func (c *Cache) takeLocked() *job {
	for p := range c.queue {
		if e := c.queue[p].Front(); e != nil {
			j := c.queue[p].Remove(e).(*job)
			j.el = nil
			return j
		}
	}
	return nil
}

// takeSmallLocked dequeues the first job a small worker may run,
// looking at the first smallScan jobs of each priority it serves, or
// nil. c.mu must be held.
func (c *Cache) takeSmallLocked() *job {
	for p := prioDemand; p <= prioPredict; p++ {
		n := 0
		for e := c.queue[p].Front(); e != nil && n < smallScan; e = e.Next() {
			if j := e.Value.(*job); j.isSmall() {
				c.queue[p].Remove(e)
				j.el = nil
				return j
			}
			n++
		}
	}
	return nil
}
