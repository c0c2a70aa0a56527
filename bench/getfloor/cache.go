package main

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// cacheFile is the cache mode's file: the parts are written into it at
// their offsets as they arrive, and readAll reads it in order, 1 MiB at a
// time, each range once its part has landed (as a reader of a cached
// file waits for its fill), from the page cache the writes left.
type cacheFile struct {
	f          *os.File
	size, part int64
	mu         sync.Mutex // guards done
	cond       *sync.Cond // on mu; signaled when a part lands
	done       []bool     // part i is written whole
}

func newCacheFile(name string, size, part int64) (*cacheFile, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	c := &cacheFile{f: f, size: size, part: part, done: make([]bool, (size+part-1)/part)}
	c.cond = sync.NewCond(&c.mu)
	return c, nil
}

// writer returns a writer that stores the part at off at its offset.
func (c *cacheFile) writer(off int64) io.Writer { return &partWriter{f: c.f, off: off} }

// landed marks the part at off written.
func (c *cacheFile) landed(off int64) {
	c.mu.Lock()
	c.done[off/c.part] = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

// readAll reads the file from start to end in 1 MiB reads, each after its
// part landed.
func (c *cacheFile) readAll() error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < c.size; off += int64(len(buf)) {
		n := min(int64(len(buf)), c.size-off)
		c.mu.Lock()
		for i := off / c.part; i <= (off+n-1)/c.part; i++ {
			for !c.done[i] {
				c.cond.Wait()
			}
		}
		c.mu.Unlock()
		if _, err := c.f.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("reading the cache file at %d: %w", off, err)
		}
	}
	return nil
}

func (c *cacheFile) close() {
	c.f.Close()
	os.Remove(c.f.Name())
}

// partWriter writes a part's bytes at consecutive offsets.
type partWriter struct {
	f   *os.File
	off int64
}

func (w *partWriter) Write(b []byte) (int, error) {
	n, err := w.f.WriteAt(b, w.off)
	w.off += int64(n)
	return n, err
}
