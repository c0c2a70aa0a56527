package block

import (
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	evictInterval = 2 * time.Second // evictor's periodic check (also samples free space)
	rescanEvery   = 5 * time.Minute // full rescan of Dir, to see other processes' segments
)

// entry is one segment file known on disk.
type entry struct {
	size  int64        // allocated bytes (approximate); guarded by Cache.mu
	stamp uint64       // Cache.stamps when last (re)added; guarded by Cache.mu
	atime atomic.Int64 // last access, unix nanoseconds
}

// indexAddLocked records segment id with size allocated bytes and returns
// its entry (an existing entry takes the new size). c.mu must be held.
func (c *Cache) indexAddLocked(id segID, size int64, touch bool) *entry {
	c.stamps++
	e := c.index[id]
	if e == nil {
		e = &entry{size: size, stamp: c.stamps}
		e.atime.Store(time.Now().UnixNano())
		c.index[id] = e
		c.objSegs[id.obj]++
		c.bytes += size
	} else {
		c.bytes += size - e.size
		e.size = size
		e.stamp = c.stamps
		if touch {
			e.atime.Store(time.Now().UnixNano())
		}
	}
	if c.bytes > c.cfg.MaxBytes {
		c.kickEvictor()
	}
	return e
}

// growLocked accounts n more bytes in the segment of e. c.mu must be held.
func (c *Cache) growLocked(e *entry, n int64) {
	e.size += n
	c.bytes += n
	if c.bytes > c.cfg.MaxBytes {
		c.kickEvictor()
	}
}

// indexStaleLocked forgets segment id after a look at the disk found no
// file, unless the index learned of one since stamp (another look or a
// write may have put it there meanwhile). c.mu must be held.
func (c *Cache) indexStaleLocked(id segID, stamp uint64) {
	if e := c.index[id]; e != nil && e.stamp <= stamp && c.files[id] == nil {
		c.indexRemoveLocked(id)
	}
}

// indexRemoveLocked forgets segment id. c.mu must be held.
func (c *Cache) indexRemoveLocked(id segID) {
	e := c.index[id]
	if e == nil {
		return
	}
	delete(c.index, id)
	c.bytes -= e.size
	if c.objSegs[id.obj]--; c.objSegs[id.obj] <= 0 {
		delete(c.objSegs, id.obj)
	}
}

// kickEvictor wakes the evictor without waiting.
func (c *Cache) kickEvictor() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// evictLoop indexes Dir, then keeps the cache within MaxBytes and the disk
// above MinFreeBytes until Close.
func (c *Cache) evictLoop() {
	defer c.wg.Done()
	c.scan(false)
	t := time.NewTicker(evictInterval)
	defer t.Stop()
	lastScan := time.Now()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
			if time.Since(lastScan) > rescanEvery {
				c.scan(true)
				lastScan = time.Now()
			}
		}
		c.evictOnce()
	}
}

// evictOnce evicts least recently used segments until the cache is below
// 90% of MaxBytes and the disk has MinFreeBytes free (plus a margin).
// Segments a Reader or a fetch holds go last; evicting one unlinks it at
// once, and its file is closed (freeing the space) by the last release.
func (c *Cache) evictOnce() {
	free, _, err := diskSpace(c.cfg.Dir)
	if err != nil {
		c.log.Warn("block cache: statfs", "err", err)
	} else {
		c.st.free.Store(free)
	}
	c.mu.Lock()
	var need int64
	if c.bytes > c.cfg.MaxBytes {
		need = c.bytes - c.cfg.MaxBytes*9/10
	}
	if err == nil && free < c.cfg.MinFreeBytes {
		need = max(need, c.cfg.MinFreeBytes-free+c.segBytes)
	}
	if need <= 0 {
		c.mu.Unlock()
		return
	}
	type cand struct {
		id    segID
		held  bool
		atime int64
		size  int64
	}
	cands := make([]cand, 0, len(c.index))
	for id, e := range c.index {
		sf := c.files[id]
		cands = append(cands, cand{id: id, held: sf != nil && sf.refs > 0, atime: e.atime.Load(), size: e.size})
	}
	c.mu.Unlock()

	sort.Slice(cands, func(i, j int) bool {
		if cands[i].held != cands[j].held {
			return !cands[i].held
		}
		return cands[i].atime < cands[j].atime
	})
	var victims []segID
	for _, cd := range cands {
		if need <= 0 {
			break
		}
		victims = append(victims, cd.id)
		need -= cd.size
	}
	var toClose []*os.File
	var removed []segID
	var evicted int64
	emptied := map[objID]bool{}
	c.mu.Lock()
	for _, id := range victims {
		e := c.index[id]
		if e == nil {
			continue
		}
		if sf := c.files[id]; sf != nil {
			delete(c.files, id) // a held one is closed by its last release
			if sf.refs == 0 {
				if sf.idleEl != nil {
					c.idle.Remove(sf.idleEl)
					sf.idleEl = nil
				}
				toClose = append(toClose, sf.f)
			}
		}
		evicted += e.size
		c.indexRemoveLocked(id)
		removed = append(removed, id)
		if c.objSegs[id.obj] == 0 {
			emptied[id.obj] = true
		}
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
	for _, id := range removed {
		if err := os.Remove(c.segPath(id)); err != nil && !os.IsNotExist(err) {
			c.log.Warn("block cache: evict", "err", err)
		}
	}
	for obj := range emptied {
		os.Remove(c.objDir(obj)) // fails harmlessly when a segment was added meanwhile
	}
	c.st.evictions.Add(int64(len(removed)))
	c.st.evictedBytes.Add(evicted)
	if free, _, err := diskSpace(c.cfg.Dir); err == nil {
		c.st.free.Store(free)
	}
}

func (c *Cache) objDir(obj objID) string {
	hx := hexID(obj)
	return filepath.Join(c.cfg.Dir, layoutDir, hx[:2], hx)
}

func (c *Cache) segPath(id segID) string {
	return filepath.Join(c.objDir(id.obj), itoa(id.seg))
}

// allocated is the disk space a file takes (sparse segments take less
// than their size).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// scan indexes the segment files in Dir (refreshing the sizes of known
// ones). With prune, it also forgets
// indexed segments that are gone from disk (taken by another process's
// evictor) and were not re-added since the scan began.
func (c *Cache) scan(prune bool) {
	c.mu.Lock()
	start := c.stamps
	c.mu.Unlock()
	root := filepath.Join(c.cfg.Dir, layoutDir)
	seen := map[segID]bool{}
	tops, err := os.ReadDir(root)
	if err != nil {
		c.log.Warn("block cache: scan", "err", err)
		return
	}
	for _, top := range tops {
		if !top.IsDir() || len(top.Name()) != 2 {
			continue
		}
		objs, _ := os.ReadDir(filepath.Join(root, top.Name()))
		for _, od := range objs {
			if !od.IsDir() {
				continue
			}
			dir := filepath.Join(root, top.Name(), od.Name())
			names, _ := os.ReadDir(dir)
			type found struct {
				id    segID
				size  int64
				mtime int64
			}
			var batch []found
			for _, de := range names {
				fi, err := de.Info()
				if err != nil || !fi.Mode().IsRegular() {
					continue
				}
				if id, ok := parseSegPath(od.Name(), de.Name()); ok {
					batch = append(batch, found{id: id, size: allocated(fi), mtime: fi.ModTime().UnixNano()})
				}
			}
			c.mu.Lock()
			for _, f := range batch {
				seen[f.id] = true
				if e := c.index[f.id]; e == nil {
					c.indexAddLocked(f.id, f.size, false).atime.Store(f.mtime)
				} else if prune {
					c.bytes += f.size - e.size
					e.size = f.size
				}
			}
			c.mu.Unlock()
			if c.ctx.Err() != nil {
				return
			}
		}
	}
	if !prune {
		return
	}
	c.mu.Lock()
	for id := range c.index {
		if !seen[id] {
			c.indexStaleLocked(id, start)
		}
	}
	c.mu.Unlock()
}
