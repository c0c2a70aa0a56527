package block

import (
	"os"
	"sync"
	"time"
)

// Damage to a sealed file while it backs passthrough opens.
//
// The kernel reads a passthrough open's backing file without ferry, so
// the per-read checks of a FUSE read never run, and the seal (seal.go) is
// only compared at the next open. Anyone who can write the data file in
// the meantime (another process on the node sharing the cache directory,
// a task that can reach it) changes what every open descriptor reads.
//
// So the cache watches the data files it handed out: every watchInterval
// it compares each one's fstat stamp (device, inode, size, allocated
// blocks, change time) with the stamp it was verified at. Any write,
// truncate or hole punched changes the change time; a file whose stamp
// moved is read and checked in full against its block records. A file
// that passes is sealed again (a chmod, a touch, a rewrite of the same
// bytes). A file that fails is damage: its bad blocks are counted as
// checksum failures (ferry_cache_checksum_failures_total), the version
// is dropped from the cache (its directory removed, the open file
// forgotten), so that the next open fetches it again into a new file,
// and one warning names the path. Descriptors that were already open on
// it keep the file the kernel was handed and read the damaged bytes until
// they are closed (FUSE cannot take a backing file back from an open);
// a new open gets the new file, whose backing key (object and inode)
// differs, so the FUSE layer does not share the damaged one with it.
// Reads through ferry of a Reader still holding the dropped file check
// every chunk again and fetch the bad blocks anew. A cold passthrough
// file (cold.go) is not watched while this process fills it (ferry's own
// writes move its stamp); once it is whole, it is (adoptWholeCold).
//
// Cost: one fstat per watched file per interval; a full read only when a
// stamp moved. Bit rot that leaves the inode untouched is still not seen
// while a file is sealed.

// watchInterval is how often the watched files' stamps are compared.
var watchInterval = 2 * time.Second

// watched is one data file this process handed out as a backing file.
type watched struct {
	at stamp // the stamp the file was last known whole and verified at
}

// watchSet is the data files this process handed out as backing files.
type watchSet struct {
	mu    sync.Mutex // guards files
	files map[*objFile]*watched
}

// watchBacking records that f's data file now backs a passthrough open
// (Reader.Backing handed it out, whole and verified: f.seal.at is its
// stamp). It is watched while a Reader holds f.
func (c *Cache) watchBacking(f *objFile) {
	f.seal.mu.Lock()
	at, ok := f.seal.at, f.seal.ok
	f.seal.mu.Unlock()
	if !ok {
		var err error
		if at, err = stampOf(f.data); err != nil {
			return
		}
	}
	ws := &c.watch
	ws.mu.Lock()
	if ws.files == nil {
		ws.files = map[*objFile]*watched{}
	}
	if _, dup := ws.files[f]; !dup {
		ws.files[f] = &watched{at: at}
	}
	ws.mu.Unlock()
}

// watchLoop checks the watched files every watchInterval until Close.
// Owner: New starts it (counted in c.wg); it returns when c.ctx ends.
func (c *Cache) watchLoop() {
	defer c.wg.Done()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.adoptWholeCold()
			c.checkWatched()
		}
	}
}

// adoptWholeCold watches the cold files (cold.go) that have become whole:
// their opens read them as any passthrough open does, and new opens
// share them while the coldFile lives.
func (c *Cache) adoptWholeCold() {
	var whole []*objFile
	c.coldMu.Lock()
	for f, cf := range c.cold {
		cf.mu.Lock()
		if cf.whole && !cf.dropped {
			whole = append(whole, f)
		}
		cf.mu.Unlock()
	}
	c.coldMu.Unlock()
	for _, f := range whole {
		c.watchBacking(f)
	}
}

// checkWatched compares the stamp of every watched file and handles
// those that moved. Files no Reader holds any more are forgotten (their
// passthrough opens are gone: a Reader lives as long as its open).
func (c *Cache) checkWatched() {
	ws := &c.watch
	ws.mu.Lock()
	files := make([]*objFile, 0, len(ws.files))
	for f := range ws.files {
		files = append(files, f)
	}
	ws.mu.Unlock()
	for _, f := range files {
		c.mu.Lock()
		live := f.refs > 0 && !c.closed
		if live {
			f.refs++ // keep it open while it is checked (Close waits for this loop)
		}
		c.mu.Unlock()
		if !live {
			ws.forget(f)
			continue
		}
		c.checkOne(ws, f)
		c.release(f)
	}
}

func (ws *watchSet) forget(f *objFile) {
	ws.mu.Lock()
	delete(ws.files, f)
	ws.mu.Unlock()
}

// checkOne compares f's stamp with the one it was verified at and, when
// it moved, verifies f in full: sealed again if it passes, dropped as
// damaged if not.
func (c *Cache) checkOne(ws *watchSet, f *objFile) {
	ws.mu.Lock()
	w := ws.files[f]
	ws.mu.Unlock()
	if w == nil {
		return
	}
	st, err := stampOf(f.data)
	if err != nil || st == w.at {
		return
	}
	bad, ok := c.verifyAll(f, st)
	switch {
	case bad > 0:
		ws.forget(f)
		c.dropDamaged(f, bad)
	case ok:
		ws.mu.Lock()
		w.at = st
		ws.mu.Unlock()
	}
	// Neither: the file changed while it was read, or a read failed;
	// the next round looks again.
}

// verifyAll reads every block of f and checks every chunk against its
// record, whatever was verified before (the file changed since). It
// returns the number of blocks that fail, and whether the file passed
// whole with the stamp st unchanged during the check (it is then sealed
// at st). A failing block's meta is dropped, so that reads through ferry
// of a Reader still holding f fetch it again instead of serving it.
func (c *Cache) verifyAll(f *objFile, st stamp) (bad int64, ok bool) {
	o := f.o
	f.seal.mu.Lock()
	defer f.seal.mu.Unlock()
	buf := make([]byte, o.bs)
	ok = true
	for idx := range o.nblocks {
		m := f.blocks[idx].Load()
		if m == nil {
			ok = false // dropped meanwhile (a read found it bad): fetched again
			continue
		}
		m.verified.Store(0)
		switch err := f.read(c, idx, buf[:o.blockLen(idx)], 0); {
		case err == errCorrupt:
			bad++
			if f.blocks[idx].CompareAndSwap(m, nil) {
				f.have.Add(-1)
			}
		case err != nil:
			ok = false
		}
	}
	if bad == 0 && st.size != o.ref.Size {
		bad = 1 // extended past the object's end
	}
	if bad > 0 {
		f.seal.ok = false
		return bad, false
	}
	if st2, err := stampOf(f.data); err != nil || st2 != st || !ok {
		return 0, false
	}
	c.st.verifiedBytes.Add(o.ref.Size)
	return 0, c.sealLocked(f)
}

// dropDamaged counts and logs the damage found in f and drops its
// version: the directory is removed (when it still holds this data file)
// and the open file forgotten, so that the next open creates and fetches
// a new one. Holders keep f until they release it, as after an eviction.
func (c *Cache) dropDamaged(f *objFile, bad int64) {
	c.st.corruptions.Add(bad)
	c.log.Warn("block cache: a cache file that backs open passthrough reads was changed by something other than ferry and fails its checksums; dropped from the cache, the next open fetches it again (descriptors already open read the damaged file until they are closed)",
		"path", f.o.dataPath(), "bad_blocks", bad)
	clearSeal(f.idx)
	mine := false
	if a, err := os.Stat(f.o.dataPath()); err == nil {
		if b, err := f.data.Stat(); err == nil {
			mine = os.SameFile(a, b)
		}
	}
	c.mu.Lock()
	if c.files[f.o.id] == f && f.refs > 0 {
		delete(c.files, f.o.id)
		f.gone = true // its last release closes it, as after an eviction
		c.orphaned += f.ent.size
		if c.index[f.o.id] == f.ent {
			c.indexRemoveLocked(f.o.id)
		}
	}
	c.mu.Unlock()
	if mine {
		c.removeObject(f.o.dir)
	}
}
