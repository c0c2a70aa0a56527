package block

import "syscall"

// Idle files: the open object files no Reader holds stay open, up to
// Cache.maxIdle of them; beyond it they are closed, least recently
// released first (their verified bits are lost; the next open opens and
// verifies again). Directory readahead parks each file it fetched until
// the task opens it, up to a window of 128 files for each of several
// readers (xargs -P 8 cat), so the bound is room for a few such windows:
// an eighth of the descriptor limit (two descriptors a file, the rest
// left to the task's handles and the store's connections), from
// minIdle to maxIdleFiles.
const (
	minIdle      = 128
	maxIdleFiles = 1024
)

// idleBound is the idle-file bound for a descriptor limit of nofile.
func idleBound(nofile uint64) int {
	return int(min(maxIdleFiles, max(minIdle, nofile/16)))
}

// nofile is the process's soft limit of open files (0 if unknown).
func nofile() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur
}

// release drops a reference taken by openObj.
func (c *Cache) release(f *objFile) {
	c.mu.Lock()
	f.refs--
	var toClose []*objFile
	if f.refs == 0 {
		switch {
		case f.gone:
			c.orphaned -= f.ent.size
			toClose = append(toClose, f)
		case c.closed || c.files[f.o.id] != f:
			toClose = append(toClose, f)
		default:
			toClose = c.idleLocked(f, toClose)
		}
		if c.bytes+c.orphaned > c.cfg.MaxBytes {
			c.kickEvictor() // it may have skipped this object while held
		}
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.closeFiles()
	}
}

// idleLocked parks f (mapped, refs == 0) on the idle list and returns the
// files to close to keep that list within c.maxIdle. c.mu must be held.
func (c *Cache) idleLocked(f *objFile, toClose []*objFile) []*objFile {
	f.idleEl = c.idle.PushFront(f)
	for c.idle.Len() > c.maxIdle {
		old := c.idle.Remove(c.idle.Back()).(*objFile)
		old.idleEl = nil
		delete(c.files, old.o.id)
		toClose = append(toClose, old)
	}
	return toClose
}
