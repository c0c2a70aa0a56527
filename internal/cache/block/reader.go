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
	held   *heldObj  // the object's files, once opened
	cold   *coldFile // the sparse file Backing handed out, referenced (cold.go)
	closed bool
}

// heldObj is the object file a Reader references. pins counts reads using
// it right now; a file replaced while pinned (it was evicted and fetches
// went on in a new one) is released by its last unpin.
type heldObj struct {
	f    *objFile
	pins int
	gone bool // no longer r.held; the last unpin releases f
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
	whole, err := r.observe(off, n)
	if err != nil {
		return 0, err
	}
	end := (off+n-1)/r.o.bs + 1
	if whole {
		end = r.o.nblocks // a small object: one GET for all of it
	}
	done, waited, err := r.read(ctx, p[:n], off, end)
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

// waitKind says how a read of a block found it.
type waitKind uint8

const (
	waitNone    waitKind = iota // cached: no wait
	waitJoined                  // on its way: the read waited for a fetch already running
	waitFetched                 // missing: the read started the fetch (or read around the cache)
)

// read fills p from off block by block; a missing block is fetched with
// the missing blocks after it up to block end.
func (r *Reader) read(ctx context.Context, p []byte, off, end int64) (done int, waited bool, err error) {
	o := r.o
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
				r.c.stageRead(o.ref, pos, int64(m), waitFetched)
				waited = true
				done += m
				continue
			}
		}
		if err != nil {
			return done, waited, err
		}
		err = h.f.read(r.c, idx, p[done:done+m], bo)
		if err == nil {
			h.f.touch()
		}
		r.unpin(h)
		if err != nil {
			if errors.Is(err, errCorrupt) && corrupt < maxAttempts {
				corrupt++
				r.c.drop(h.f, idx)
				continue
			}
			return done, waited, fmt.Errorf("block: cache read %s: %w", o.ref.Key, err)
		}
		if w != waitNone {
			r.c.st.bytesNet.Add(int64(m))
		} else {
			r.c.st.bytesCache.Add(int64(m))
		}
		r.c.stageRead(o.ref, pos, int64(m), w)
		waited = waited || w != waitNone
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

// block returns the object file holding block idx, held and pinned by r
// (the caller unpins it), fetching the block (with the missing blocks
// after it, up to end) when it is not cached. waited says whether and how
// the read waited for a fetch.
func (r *Reader) block(ctx context.Context, idx, end int64) (h *heldObj, waited waitKind, err error) {
	attempts := 0
	for range maxRounds {
		h, err := r.pin()
		if err != nil {
			return nil, waited, err
		}
		if h != nil && h.f.load(r.c, idx) {
			return h, waited, nil
		}
		if h != nil {
			r.unpin(h)
		}
		// Not in the file we hold: it may be in a newer file (ours was
		// evicted), or not cached.
		f, err := r.c.openObj(r.o, false)
		if err != nil {
			return nil, waited, err
		}
		if f != nil && f.load(r.c, idx) {
			h, err := r.hold(f)
			return h, waited, err
		}
		if f != nil {
			r.c.release(f)
		}
		fl, present, started, err := r.c.ensureFlight(r.o, idx, end, prioDemand)
		if err != nil {
			return nil, waited, err
		}
		if present {
			continue
		}
		if started || waited == waitFetched {
			waited = waitFetched
			if started {
				r.c.pred.noteDemand(keyOf(r.o.ref), idx) // never the prediction's
			}
		} else {
			waited = waitJoined
		}
		f, err = r.c.wait(ctx, fl)
		if f != nil {
			h, err := r.hold(f)
			if err != nil || h.f.load(r.c, idx) {
				return h, waited, err
			}
			r.unpin(h)
		}
		switch {
		case err == nil, errors.Is(err, errDropped):
		case ctx.Err() != nil:
			return nil, waited, err
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

// pin pins the file r holds (nil when it holds none).
func (r *Reader) pin() (*heldObj, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	h := r.held
	if h != nil {
		h.pins++
	}
	return h, nil
}

// hold records that r references f (a reference from openObj) and returns
// it pinned. A file held before is replaced (it was evicted; its last
// unpin releases it). On a closed Reader it releases f and fails.
func (r *Reader) hold(f *objFile) (*heldObj, error) {
	var rel *objFile
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.c.release(f)
		return nil, ErrClosed
	}
	h := r.held
	switch {
	case h != nil && h.f == f:
		rel = f // a concurrent read took it first: drop our extra reference
	default:
		if h != nil {
			h.gone = true
			if h.pins == 0 {
				rel = h.f
			}
		}
		h = &heldObj{f: f}
		r.held = h
	}
	h.pins++
	r.mu.Unlock()
	if rel != nil {
		r.c.release(rel)
	}
	return h, nil
}

// unpin ends a read's use of h; the last unpin of a replaced file releases
// it.
func (r *Reader) unpin(h *heldObj) {
	r.mu.Lock()
	h.pins--
	rel := h.pins == 0 && h.gone
	r.mu.Unlock()
	if rel {
		r.c.release(h.f)
	}
}

// file returns the object's file, held and pinned, opening it when r
// holds none yet; nil when it is not on disk.
func (r *Reader) file() *heldObj {
	h, err := r.pin()
	if err != nil || h != nil {
		return h
	}
	f, _ := r.c.openObj(r.o, false)
	if f == nil {
		return nil
	}
	h, _ = r.hold(f)
	return h
}

// streamed is how far the reader has read in order in its current run.
func (r *Reader) streamed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.det.window == 0 {
		return 0
	}
	return r.det.next - r.det.runStart
}

// observe feeds a read to the sequential detector and queues what it
// asks; whole says the read should fetch the whole (small) object.
func (r *Reader) observe(off, n int64) (whole bool, err error) {
	c := r.c
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false, ErrClosed
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
		c.startFill(r.o, false)
	}
	if plan.to > plan.from {
		c.plan(r.o, plan.from, plan.to, prioReadahead, r)
	}
	return plan.whole, nil
}

// CachedFile returns an open cache file and the offset in it that hold
// the object's bytes [off, off+n) (n clipped at the end of the object)
// when they are all cached, checksums verified, so the FUSE layer can hand
// the kernel a file descriptor (splice) instead of copying. ok is false
// when some of the range is not cached; the caller then uses ReadAt. The
// file stays open until r is closed; the caller must not close it. A hit
// counts as a read for readahead.
func (r *Reader) CachedFile(off, n int64) (f *os.File, fileOff int64, ok bool) {
	o := r.o
	if n <= 0 || off < 0 || off >= o.ref.Size {
		return nil, 0, false
	}
	n = min(n, o.ref.Size-off)
	h := r.file()
	if h == nil {
		return nil, 0, false
	}
	defer r.unpin(h)
	of := h.f
	for idx := off / o.bs; idx*o.bs < off+n; idx++ {
		if !of.load(r.c, idx) {
			return nil, 0, false
		}
		lo := max(off, idx*o.bs) - idx*o.bs
		hi := min(off+n, idx*o.bs+o.blockLen(idx)) - idx*o.bs
		if err := of.check(r.c, idx, nil, lo, hi-lo); err != nil {
			if errors.Is(err, errCorrupt) {
				r.c.drop(of, idx)
			}
			return nil, 0, false
		}
	}
	if whole, err := r.observe(off, n); err != nil {
		return nil, 0, false
	} else if whole {
		r.c.plan(o, 0, o.nblocks, prioReadahead, r) // what is missing of a small object
	}
	of.touch()
	r.c.st.hits.Add(1)
	r.c.st.bytesCache.Add(n)
	r.c.stageRead(o.ref, off, n, waitNone)
	return of.data, off, true
}

// ID names the object version r reads (as its cache files do): two
// Readers with the same ID read the same bytes.
func (r *Reader) ID() string { return hexID(r.o.id) }

// Close releases the Reader's file and drops its queued readahead. It
// always returns nil; ReadAt after Close returns ErrClosed.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var rel *objFile
	if h := r.held; h != nil {
		if h.pins > 0 {
			h.gone = true // the last unpin releases it
		} else {
			rel = h.f
		}
	}
	r.held = nil
	cold := r.cold
	r.cold = nil
	r.c.st.windowSum.Add(-r.det.window)
	r.det.window = 0
	r.mu.Unlock()
	r.c.st.readers.Add(-1)
	r.c.dropQueued(r)
	if rel != nil {
		r.c.release(rel)
	}
	if cold != nil {
		r.c.coldRelease(cold)
	}
	return nil
}
