package block

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	evictInterval = 2 * time.Second // evictor's periodic check (also samples free space)
	rescanEvery   = 5 * time.Minute // full rescan of Dir, to see other processes' objects
)

// entry is one object's files known on disk.
type entry struct {
	size  int64        // allocated bytes of both files (approximate); guarded by Cache.mu
	stamp uint64       // Cache.stamps when last (re)added; guarded by Cache.mu
	atime atomic.Int64 // last access, unix nanoseconds
}

// indexAddLocked records object id with size allocated bytes and returns
// its entry (an existing entry takes the new size). c.mu must be held.
func (c *Cache) indexAddLocked(id objID, size int64, touch bool) *entry {
	c.stamps++
	e := c.index[id]
	if e == nil {
		e = &entry{size: size, stamp: c.stamps}
		e.atime.Store(time.Now().UnixNano())
		c.index[id] = e
		c.bytes += size
	} else {
		c.bytes += size - e.size
		e.size = size
		e.stamp = c.stamps
		if touch {
			e.atime.Store(time.Now().UnixNano())
		}
	}
	if c.bytes+c.orphaned > c.cfg.MaxBytes {
		c.kickEvictor()
	}
	return e
}

// growLocked accounts n more bytes in the object of e. c.mu must be held.
func (c *Cache) growLocked(e *entry, n int64) {
	e.size += n
	c.bytes += n
	if c.bytes+c.orphaned > c.cfg.MaxBytes {
		c.kickEvictor()
	}
}

// indexStaleLocked forgets object id after a look at the disk found no
// files, unless the index learned of them since stamp (another look or a
// write may have put them there meanwhile). c.mu must be held.
func (c *Cache) indexStaleLocked(id objID, stamp uint64) {
	if e := c.index[id]; e != nil && e.stamp <= stamp && c.files[id] == nil {
		c.indexRemoveLocked(id)
	}
}

// indexRemoveLocked forgets object id. c.mu must be held.
func (c *Cache) indexRemoveLocked(id objID) {
	if e := c.index[id]; e != nil {
		delete(c.index, id)
		c.bytes -= e.size
	}
}

// kickEvictor wakes the evictor without waiting.
func (c *Cache) kickEvictor() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// evictLoop removes earlier layouts, indexes Dir, then keeps the cache
// within MaxBytes and the disk above MinFreeBytes until Close.
func (c *Cache) evictLoop() {
	defer c.wg.Done()
	c.removeLegacy()
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
			c.closeUnlinked()
			c.sweepCold(false)
		}
		c.evictOnce()
	}
}

// removeLegacy deletes the directories of earlier cache layouts (their
// blocks are not at object offsets and are never read).
func (c *Cache) removeLegacy() {
	for _, d := range legacyDirs {
		p := filepath.Join(c.cfg.Dir, d)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			c.log.Warn("block cache: removing an old cache layout", "path", p, "err", err)
		} else {
			c.log.Info("block cache: removed an old cache layout", "path", p)
		}
	}
}

// closeUnlinked closes idle files that another process sharing Dir has
// evicted, so that their space returns now rather than when they age out
// of the idle list.
func (c *Cache) closeUnlinked() {
	c.mu.Lock()
	var idle []*objFile
	for e := c.idle.Front(); e != nil; e = e.Next() {
		idle = append(idle, e.Value.(*objFile))
	}
	c.mu.Unlock()
	for _, f := range idle {
		if !unlinked(f.data) {
			continue
		}
		c.mu.Lock()
		if f.refs == 0 && f.idleEl != nil && c.files[f.o.id] == f {
			c.idle.Remove(f.idleEl)
			f.idleEl = nil
			delete(c.files, f.o.id)
			c.indexRemoveLocked(f.o.id)
		} else {
			f = nil
		}
		c.mu.Unlock()
		if f != nil {
			f.closeFiles()
		}
	}
}

// evictOnce evicts least recently used objects until the cache is below
// 90% of MaxBytes and the disk has MinFreeBytes free (plus a margin).
// Objects a Reader or a fetch holds go last; evicting one unlinks its
// files at once, and they are closed (freeing the space) by the last
// release: a passthrough open, whose Reader holds the file, keeps reading
// it, and its bytes count until it is closed.
func (c *Cache) evictOnce() {
	free, _, err := diskSpace(c.cfg.Dir)
	switch {
	case err != nil && !c.statfsFailing:
		c.log.Warn("block cache: statfs of the cache dir fails (the free-space floor is not enforced until it works again)", "err", err)
		c.statfsFailing = true
	case err == nil:
		if c.statfsFailing {
			c.log.Info("block cache: statfs of the cache dir works again")
			c.statfsFailing = false
		}
		c.st.free.Store(free)
	}
	c.mu.Lock()
	var need int64
	if total := c.bytes + c.orphaned; total > c.cfg.MaxBytes {
		need = total - c.cfg.MaxBytes*9/10
	}
	if err == nil && free < c.cfg.MinFreeBytes {
		need = max(need, c.cfg.MinFreeBytes-free+c.cfg.PartSize)
	}
	c.mu.Unlock()
	if need > 0 {
		c.evict(need)
	}
}

// evict evicts least recently used objects (those held last) until need
// bytes are freed.
func (c *Cache) evict(need int64) {
	c.mu.Lock()
	type cand struct {
		id    objID
		held  bool
		atime int64
		size  int64
	}
	cands := make([]cand, 0, len(c.index))
	for id, e := range c.index {
		f := c.files[id]
		cands = append(cands, cand{id: id, held: f != nil && f.refs > 0, atime: e.atime.Load(), size: e.size})
	}
	c.mu.Unlock()

	sort.Slice(cands, func(i, j int) bool {
		if cands[i].held != cands[j].held {
			return !cands[i].held
		}
		return cands[i].atime < cands[j].atime
	})
	var victims []objID
	for _, cd := range cands {
		if need <= 0 {
			break
		}
		victims = append(victims, cd.id)
		need -= cd.size
	}
	var toClose []*objFile
	var removed []objID
	var evicted int64
	c.mu.Lock()
	for _, id := range victims {
		e := c.index[id]
		if e == nil {
			continue
		}
		if f := c.files[id]; f != nil {
			delete(c.files, id)
			if f.refs == 0 {
				if f.idleEl != nil {
					c.idle.Remove(f.idleEl)
					f.idleEl = nil
				}
				toClose = append(toClose, f)
			} else {
				f.gone = true // its last release closes it
				c.orphaned += e.size
			}
		}
		evicted += e.size
		c.indexRemoveLocked(id)
		removed = append(removed, id)
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.closeFiles()
	}
	for _, id := range removed {
		c.removeObject(c.objDir(id))
	}
	c.st.evictions.Add(int64(len(removed)))
	c.st.evictedBytes.Add(evicted)
	if free, _, err := diskSpace(c.cfg.Dir); err == nil {
		c.st.free.Store(free)
	}
}

// objDir is the directory of object id.
func (c *Cache) objDir(id objID) string {
	hx := hexID(id)
	return filepath.Join(c.cfg.Dir, layoutDir, hx[:2], hx)
}

// removeObject removes an object's directory: renamed away first (one
// atomic step, so that no process opens half of it afterwards), then
// deleted. Processes holding its files keep them until they close them.
func (c *Cache) removeObject(dir string) {
	gone := fmt.Sprintf("%s%s%d-%d", dir, goneMark, os.Getpid(), newSeq.Add(1))
	if err := os.Rename(dir, gone); err != nil {
		if !os.IsNotExist(err) {
			c.log.Warn("block cache: evict", "err", err)
		}
		return
	}
	if err := os.RemoveAll(gone); err != nil {
		c.log.Warn("block cache: evict", "err", err)
	}
}

// allocated is the disk space a file takes (sparse files take less than
// their size).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// scan indexes the object files in Dir (refreshing the sizes of known
// ones). With prune, it also forgets indexed objects that are gone from
// disk (taken by another process's evictor) and were not re-added since
// the scan began.
func (c *Cache) scan(prune bool) {
	c.mu.Lock()
	start := c.stamps
	c.mu.Unlock()
	root := filepath.Join(c.cfg.Dir, layoutDir)
	seen := map[objID]bool{}
	tops, err := os.ReadDir(root)
	if err != nil {
		c.log.Warn("block cache: scan", "err", err)
		return
	}
	for _, top := range tops {
		if !top.IsDir() || len(top.Name()) != 2 {
			continue
		}
		sub := filepath.Join(root, top.Name())
		names, _ := os.ReadDir(sub)
		type found struct {
			id          objID
			size, mtime int64
		}
		var batch []found
		for _, de := range names {
			dir := filepath.Join(sub, de.Name())
			if strings.Contains(de.Name(), goneMark) || strings.Contains(de.Name(), newMark) {
				// Left by a process that died half way through an
				// eviction or a creation (a live one is done in moments).
				if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
					os.RemoveAll(dir)
				}
				continue
			}
			id, ok := parseName(de.Name())
			if !ok || !de.IsDir() {
				continue
			}
			fd := found{id: id}
			for _, n := range []string{idxName, dataName} {
				if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
					fd.size += allocated(fi)
					fd.mtime = max(fd.mtime, fi.ModTime().UnixNano())
				}
			}
			batch = append(batch, fd)
		}
		c.mu.Lock()
		for _, fd := range batch {
			seen[fd.id] = true
			if e := c.index[fd.id]; e == nil {
				c.indexAddLocked(fd.id, fd.size, false).atime.Store(fd.mtime)
			} else if prune {
				c.bytes += fd.size - e.size
				e.size = fd.size
			}
		}
		c.mu.Unlock()
		if c.ctx.Err() != nil {
			return
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
