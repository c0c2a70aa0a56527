package block

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

const (
	// maxHeld bounds the segment files one Reader keeps referenced (and so
	// open). A file returned by CachedFile stays valid until maxHeld other
	// segments have been touched through the same Reader, or Close.
	maxHeld = 16
	// maxAttempts bounds fetches of one block for one read when they fail
	// with transient errors (the store's retry decorator retries each), and
	// refetches of a block found corrupt.
	maxAttempts = 2
	// maxRounds bounds the wait/open rounds of one block (dropped
	// readahead, evicted before use).
	maxRounds = 16
)

// Reader reads one object version through the cache, with its own
// sequential detector and readahead. It is safe for concurrent use (FUSE
// issues a handle's reads in parallel).
type Reader struct {
	c *Cache
	o *object

	// mu guards the fields below. Never held during I/O or while taking
	// Cache.mu.
	mu     sync.Mutex
	det    detector
	held   map[int64]*heldSeg // referenced segments by number
	order  []int64            // segment numbers in held, oldest first
	closed bool
}

// heldSeg is a segment a Reader references. pins counts reads using it
// right now; a pinned segment is not released to make room.
type heldSeg struct {
	sf   *segFile
	pins int
	gone bool // no longer in held; the last unpin releases sf
}

// ReadAt reads len(p) bytes at off with io.ReaderAt semantics: it returns
// n < len(p) only with an error, io.EOF at the end of the object. Missing
// blocks are fetched (and readahead queued when the access is sequential);
// cached blocks are verified against their checksums, and a corrupt one is
// dropped and fetched again. Store errors come back wrapped (errors.Is
// sees objstore.ErrNotFound, ErrPermission, ...); an object that changed
// under the Reader gives an error wrapping objstore.ErrPrecondition. After
// Close, or the Cache's Close, it returns ErrClosed.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	size := r.o.ref.Size
	if off < 0 {
		return 0, fmt.Errorf("block: negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	if err := r.observe(off, n); err != nil {
		return 0, err
	}
	done, waited, err := r.read(ctx, p[:n], off)
	if waited {
		r.c.st.misses.Add(1)
	} else {
		r.c.st.hits.Add(1)
	}
	if err != nil {
		return done, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// read fills p from off block by block.
func (r *Reader) read(ctx context.Context, p []byte, off int64) (done int, waited bool, err error) {
	o := r.o
	end := (off+int64(len(p))-1)/o.bs + 1
	corrupt := 0
	for done < len(p) {
		pos := off + int64(done)
		idx := pos / o.bs
		bo := pos - idx*o.bs
		m := int(min(int64(len(p)-done), o.blockLen(idx)-bo))
		h, w, err := r.block(ctx, idx, end)
		if errors.Is(err, errCacheIO) {
			// The cache cannot take the block (disk full?): read around it.
			if err = r.direct(ctx, p[done:done+m], pos); err == nil {
				waited = true
				done += m
				continue
			}
		}
		if err != nil {
			return done, waited, err
		}
		b := idx % o.segBlocks
		err = h.sf.read(r.c, b, p[done:done+m], bo)
		if err == nil {
			h.sf.touch()
		}
		r.unpin(h)
		if err != nil {
			if errors.Is(err, errCorrupt) && corrupt < maxAttempts {
				corrupt++
				r.c.drop(h.sf, b)
				continue
			}
			return done, waited, fmt.Errorf("block: cache read %s: %w", o.ref.Key, err)
		}
		if w {
			r.c.st.bytesNet.Add(int64(m))
		} else {
			r.c.st.bytesCache.Add(int64(m))
		}
		waited = waited || w
		done += m
	}
	return done, waited, nil
}

// direct reads p at off from the store, bypassing the cache.
func (r *Reader) direct(ctx context.Context, p []byte, off int64) error {
	ref := r.o.ref
	rd, err := ref.Store.NewReader(ctx, ref.Key, off, int64(len(p)), objstore.ReadOptions{IfVersion: ref.Version})
	if err != nil {
		return fmt.Errorf("block: read %s at %d: %w", ref.Key, off, err)
	}
	defer rd.Close()
	if v := rd.Info().Version; v != "" && ref.Version != "" && v != ref.Version {
		return fmt.Errorf("block: %s changed (version %q, want %q): %w", ref.Key, v, ref.Version, objstore.ErrPrecondition)
	}
	n, err := io.ReadFull(rd, p)
	r.c.st.fetched.Add(int64(n))
	r.c.st.direct.Add(int64(n))
	r.c.st.bytesNet.Add(int64(n))
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errShortBody
	}
	if err != nil {
		return fmt.Errorf("block: read %s at %d: %w", ref.Key, off, err)
	}
	return nil
}

// block returns the segment holding block idx, held and pinned by r (the
// caller unpins it), fetching the block (with the missing blocks after it,
// up to end) when it is not cached. waited reports a fetch.
func (r *Reader) block(ctx context.Context, idx, end int64) (h *heldSeg, waited bool, err error) {
	seg, b := idx/r.o.segBlocks, idx%r.o.segBlocks
	attempts := 0
	for range maxRounds {
		h, err := r.pin(seg)
		if err != nil {
			return nil, waited, err
		}
		if h != nil && h.sf.load(r.c, b) {
			return h, waited, nil
		}
		if h != nil {
			r.unpin(h)
		}
		// Not in the segment we hold: it may be in a newer file (ours was
		// evicted), or not cached.
		sf, err := r.c.openSeg(r.o, seg, false)
		if err != nil {
			return nil, waited, err
		}
		if sf != nil && sf.load(r.c, b) {
			h, err := r.hold(seg, sf)
			return h, waited, err
		}
		if sf != nil {
			r.c.release(sf)
		}
		fl, present, err := r.c.ensureFlight(r.o, idx, end, prioDemand)
		if err != nil {
			return nil, waited, err
		}
		if present {
			continue
		}
		waited = true
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, waited, ctx.Err()
		}
		switch err := fl.err; {
		case err == nil, errors.Is(err, errDropped):
		case final(err) || attempts+1 >= maxAttempts:
			return nil, waited, err
		default:
			attempts++
		}
	}
	return nil, waited, fmt.Errorf("block: %s block %d: gave up after %d rounds", r.o.ref.Key, idx, maxRounds)
}

// final reports whether a fetch error is not worth another fetch.
func final(err error) bool {
	for _, e := range []error{objstore.ErrPrecondition, objstore.ErrNotFound, objstore.ErrPermission,
		objstore.ErrUnsupported, ErrClosed, context.Canceled} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pin pins segment seg if r holds it (nil otherwise).
func (r *Reader) pin(seg int64) (*heldSeg, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	h := r.held[seg]
	if h != nil {
		h.pins++
	}
	return h, nil
}

// hold records that r references sf (a reference from openSeg) as segment
// seg and returns it pinned. A copy held before is replaced (it was
// evicted; its last unpin releases it). The oldest unpinned segments
// beyond maxHeld are released. On a closed Reader it releases sf and
// fails.
func (r *Reader) hold(seg int64, sf *segFile) (*heldSeg, error) {
	var rel []*segFile
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.c.release(sf)
		return nil, ErrClosed
	}
	h := r.held[seg]
	switch {
	case h != nil && h.sf == sf:
		rel = append(rel, sf) // a concurrent read took it first: drop our extra reference
	default:
		if h != nil {
			h.gone = true
			if h.pins == 0 {
				rel = append(rel, h.sf)
			}
		} else {
			r.order = append(r.order, seg)
		}
		h = &heldSeg{sf: sf}
		r.held[seg] = h
		for i := 0; len(r.held) > maxHeld && i < len(r.order); {
			old := r.order[i]
			oh := r.held[old]
			if oh != nil && (oh.pins > 0 || oh == h) {
				i++
				continue
			}
			r.order = append(r.order[:i], r.order[i+1:]...)
			if oh != nil {
				delete(r.held, old)
				rel = append(rel, oh.sf)
			}
		}
	}
	h.pins++
	r.mu.Unlock()
	for _, sf := range rel {
		r.c.release(sf)
	}
	return h, nil
}

// unpin ends a read's use of h; the last unpin of a replaced segment
// releases it.
func (r *Reader) unpin(h *heldSeg) {
	r.mu.Lock()
	h.pins--
	rel := h.pins == 0 && h.gone
	r.mu.Unlock()
	if rel {
		r.c.release(h.sf)
	}
}

// observe feeds a read to the sequential detector and queues what it asks.
func (r *Reader) observe(off, n int64) error {
	c := r.c
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	before := r.det.window
	// Readahead lands in the cache: all windows together stay within a
	// quarter of it, so a crowd of readers does not evict what it fetched
	// before reading it.
	maxWindow := min(c.cfg.ReadaheadMax, max(2*r.o.bs, c.cfg.MaxBytes/4/max(1, c.st.readers.Load())))
	plan := r.det.observe(off, n, raParams{bs: r.o.bs, nblocks: r.o.nblocks, maxWindow: maxWindow, partBlocks: c.partBlocks})
	c.st.windowSum.Add(r.det.window - before)
	r.mu.Unlock()
	if plan.collapsed {
		c.st.collapses.Add(1)
		c.dropQueued(r)
	}
	if plan.random && c.cfg.FillRandomUpTo > 0 && r.o.ref.Size <= c.cfg.FillRandomUpTo {
		c.startFill(r.o)
	}
	if plan.to > plan.from {
		c.plan(r.o, plan.from, plan.to, prioReadahead, r)
	}
	return nil
}

// CachedFile returns an open cache file and the offset in it that hold the
// object's bytes [off, off+n) (n clipped at the end of the object) when
// they are all cached in one segment file, checksums verified, so the FUSE
// layer can hand the kernel a file descriptor (splice) instead of copying.
// ok is false when some of the range is not cached or it spans two
// segments (16 MiB by default); the caller then uses ReadAt. The file stays
// open until maxHeld (16) other segments have been touched through r, or r
// is closed; the caller must not close it. A hit counts as a read for
// readahead.
func (r *Reader) CachedFile(off, n int64) (f *os.File, fileOff int64, ok bool) {
	o := r.o
	if n <= 0 || off < 0 || off >= o.ref.Size {
		return nil, 0, false
	}
	n = min(n, o.ref.Size-off)
	segBytes := o.segBlocks * o.bs
	seg := off / segBytes
	if (off+n-1)/segBytes != seg {
		return nil, 0, false
	}
	h, err := r.pin(seg)
	if err != nil {
		return nil, 0, false
	}
	if h == nil {
		sf, _ := r.c.openSeg(o, seg, false)
		if sf == nil {
			return nil, 0, false
		}
		if h, err = r.hold(seg, sf); err != nil {
			return nil, 0, false
		}
	}
	defer r.unpin(h)
	sf := h.sf
	for idx := off / o.bs; idx*o.bs < off+n; idx++ {
		b := idx % o.segBlocks
		if !sf.load(r.c, b) {
			return nil, 0, false
		}
		lo := max(off, idx*o.bs) - idx*o.bs
		hi := min(off+n, idx*o.bs+o.blockLen(idx)) - idx*o.bs
		if err := sf.check(r.c, b, nil, lo, hi-lo); err != nil {
			if errors.Is(err, errCorrupt) {
				r.c.drop(sf, b)
			}
			return nil, 0, false
		}
	}
	if r.observe(off, n) != nil {
		return nil, 0, false
	}
	sf.touch()
	r.c.st.hits.Add(1)
	r.c.st.bytesCache.Add(n)
	return sf.f, o.hdrLen + off - seg*segBytes, true
}

// Close releases the Reader's segments and drops its queued readahead. It
// always returns nil; ReadAt after Close returns ErrClosed.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var rel []*segFile
	for _, h := range r.held {
		if h.pins > 0 {
			h.gone = true // the last unpin releases it
		} else {
			rel = append(rel, h.sf)
		}
	}
	r.held = nil
	r.order = nil
	r.c.st.windowSum.Add(-r.det.window)
	r.det.window = 0
	r.mu.Unlock()
	r.c.st.readers.Add(-1)
	r.c.dropQueued(r)
	for _, sf := range rel {
		r.c.release(sf)
	}
	return nil
}
