package block

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

const (
	evictInterval = 2 * time.Second  // evictor's periodic check (also samples free space)
	rescanEvery   = 5 * time.Minute  // full rescan of Dir, to see other processes' blocks
	staleTmpAge   = 30 * time.Minute // a temporary file older than this is a crash leftover
)

// entry is one block known on disk.
type entry struct {
	size  int64        // on-disk bytes; guarded by Cache.mu
	stamp uint64       // Cache.stamps when last (re)added; guarded by Cache.mu
	atime atomic.Int64 // last access, unix nanoseconds
}

// indexAddLocked records block id of size bytes on disk and returns its
// entry; touch marks it used now. c.mu must be held.
func (c *Cache) indexAddLocked(id blockID, size int64, touch bool) *entry {
	c.stamps++
	e := c.index[id]
	if e == nil {
		e = &entry{size: size, stamp: c.stamps}
		e.atime.Store(time.Now().UnixNano())
		c.index[id] = e
		c.objBlocks[id.obj]++
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

// indexStaleLocked forgets block id after a look at the disk found no valid
// file, unless the index learned of a new one since stamp (a fetch or
// another look may have put it there meanwhile). c.mu must be held.
func (c *Cache) indexStaleLocked(id blockID, stamp uint64) {
	if e := c.index[id]; e != nil && e.stamp <= stamp && c.files[id] == nil {
		c.indexRemoveLocked(id)
	}
}

// indexRemoveLocked forgets block id. c.mu must be held.
func (c *Cache) indexRemoveLocked(id blockID) {
	e := c.index[id]
	if e == nil {
		return
	}
	delete(c.index, id)
	c.bytes -= e.size
	if c.objBlocks[id.obj]--; c.objBlocks[id.obj] <= 0 {
		delete(c.objBlocks, id.obj)
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
	close(c.scanned)
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

// evictOnce evicts least recently used blocks until the cache is below 90%
// of MaxBytes and the disk has MinFreeBytes free (plus a margin). Blocks a
// Reader holds go last; evicting one unlinks it at once, and its file is
// closed (freeing the space) when the last holder lets go.
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
		need = max(need, c.cfg.MinFreeBytes-free+8*c.cfg.BlockSize)
	}
	if need <= 0 {
		c.mu.Unlock()
		return
	}
	type cand struct {
		id    blockID
		held  bool
		atime int64
		size  int64
	}
	cands := make([]cand, 0, len(c.index))
	for id, e := range c.index {
		bf := c.files[id]
		cands = append(cands, cand{id: id, held: bf != nil && bf.refs > 0, atime: e.atime.Load(), size: e.size})
	}
	c.mu.Unlock()

	sort.Slice(cands, func(i, j int) bool {
		if cands[i].held != cands[j].held {
			return !cands[i].held
		}
		return cands[i].atime < cands[j].atime
	})
	var victims []blockID
	for _, cd := range cands {
		if need <= 0 {
			break
		}
		victims = append(victims, cd.id)
		need -= cd.size
	}
	var toClose []*os.File
	var removed []blockID
	var evicted int64
	emptied := map[objID]bool{}
	c.mu.Lock()
	for _, id := range victims {
		e := c.index[id]
		if e == nil {
			continue
		}
		if bf := c.files[id]; bf != nil {
			delete(c.files, id) // a held one is closed by its last release
			if bf.refs == 0 {
				if bf.idleEl != nil {
					c.idle.Remove(bf.idleEl)
					bf.idleEl = nil
				}
				toClose = append(toClose, bf.f)
			}
		}
		evicted += e.size
		c.indexRemoveLocked(id)
		removed = append(removed, id)
		if c.objBlocks[id.obj] == 0 {
			emptied[id.obj] = true
		}
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
	for _, id := range removed {
		if err := os.Remove(c.blockPath(id)); err != nil && !os.IsNotExist(err) {
			c.log.Warn("block cache: evict", "err", err)
		}
	}
	for obj := range emptied {
		os.Remove(c.objDir(obj)) // fails harmlessly when another process added a block
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

func (c *Cache) blockPath(id blockID) string {
	return filepath.Join(c.objDir(id.obj), itoa(id.idx))
}

// scan indexes the block files in Dir and removes stale temporary files.
// With prune, it also forgets indexed blocks that are gone from disk (taken
// by another process's evictor) and were not used since the scan began.
func (c *Cache) scan(prune bool) {
	c.mu.Lock()
	start := c.stamps
	c.mu.Unlock()
	root := filepath.Join(c.cfg.Dir, layoutDir)
	seen := map[blockID]bool{}
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
				id    blockID
				size  int64
				mtime int64
			}
			var batch []found
			for _, de := range names {
				fi, err := de.Info()
				if err != nil || !fi.Mode().IsRegular() {
					continue
				}
				if strings.HasPrefix(de.Name(), tmpPrefix) {
					if time.Since(fi.ModTime()) > staleTmpAge {
						os.Remove(filepath.Join(dir, de.Name()))
					}
					continue
				}
				if id, ok := parseBlockPath(od.Name(), de.Name()); ok {
					batch = append(batch, found{id: id, size: fi.Size(), mtime: fi.ModTime().UnixNano()})
				}
			}
			c.mu.Lock()
			for _, f := range batch {
				seen[f.id] = true
				if c.index[f.id] == nil {
					c.indexAddLocked(f.id, f.size, false).atime.Store(f.mtime)
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
