package block

import (
	"context"
	"fmt"
	"os"
)

// Passthrough: the data file a FUSE passthrough open hands the kernel
// (whole: seal.go; or cold: cold.go).

// Backing returns a new read-only descriptor of the object's data file
// for the FUSE layer to hand the kernel as the backing file of a
// passthrough open, and the identity of its bytes (key: two opens with
// the same key may share one backing file); the caller closes f (the
// kernel keeps its own reference). The Reader keeps the file referenced
// (and so counted in the cache's size) until it is closed: evicting it
// unlinks it without breaking the open.
//
// The file is whole and verified (see seal.go), or, when cold is true and
// cold passthrough is on (SetPrecontent), possibly a sparse file whose
// missing ranges this process fills as the kernel asks for them before
// each read (cold.go); partial then says so. Such a file must not be
// mapped (mmap) before it is whole: the kernel asks before reads, not
// before the faults of a mapping made through FUSE (see CompleteBacking).
// ok is false otherwise: a block is missing (or failed its checksum: it
// is dropped and fetched again by the next read), the object is empty or
// too large to open cold, or (cold false) it is open cold and not whole.
func (r *Reader) Backing(cold bool) (f *os.File, key string, partial, ok bool) {
	c := r.c
	cold = cold && c.hsm.Load() != nil
	h := r.file()
	if h == nil && cold && c.coldAllowed(r.o.ref.Size) && c.roomFor(r.o.ref.Size) {
		// Not on disk yet: make its files, to open them cold.
		if of, err := c.openObj(r.o, true); err == nil {
			h, _ = r.hold(of)
		}
	}
	if h == nil {
		return nil, "", false, false
	}
	defer r.unpin(h)
	if cf := c.coldOf(h.f); cf != nil {
		// Opened cold before (and maybe whole by now): share its file.
		if !cold && !cf.isWhole() {
			c.coldRelease(cf)
			return nil, "", false, false
		}
		f, key, ok := r.coldBacking(cf)
		return f, key, ok && !cf.isWhole(), ok
	}
	if c.whole(h.f) {
		ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", h.f.data.Fd()), os.O_RDONLY, 0)
		if err != nil {
			c.log.Debug("block cache: reopening a data file read-only", "path", r.o.dataPath(), "err", err)
			return nil, "", false, false
		}
		h.f.touch()
		c.watchBacking(h.f) // damage while it backs opens is found (watch.go)
		return ro, backingKey(r.o, h.f), false, true
	}
	if !cold || !c.coldAllowed(r.o.ref.Size) || !c.roomFor(r.o.ref.Size) {
		return nil, "", false, false
	}
	cf, err := c.coldFor(h.f)
	if err != nil {
		c.log.Debug("block cache: a cold passthrough open", "path", r.o.dataPath(), "err", err)
		return nil, "", false, false
	}
	h.f.touch()
	f, key, ok = r.coldBacking(cf)
	return f, key, ok, ok
}

// CompleteBacking makes the file a cold Backing handed out whole: every
// block fetched (or waited for) and verified, so that a mapping of it
// never reads a hole. It returns at once for a Reader whose backing file
// was whole, or that has none.
func (r *Reader) CompleteBacking(ctx context.Context) error {
	r.mu.Lock()
	cf, closed := r.cold, r.closed
	r.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if cf == nil || cf.isWhole() {
		return nil
	}
	// Fetch what is missing in parallel first (into the object's current
	// file), then check every block of cf's file (and copy in those that
	// landed in a newer one).
	if err := r.c.warm(ctx, r.o, prioDemand, int64(r.c.nworkers)*r.c.partBlocks, r.o.nblocks, nil); err != nil {
		return err
	}
	return cf.Fill(ctx, 0, r.o.ref.Size, 0)
}

// NotePassthrough counts an open whose reads the kernel serves from the
// file Backing returned (reads ferry never sees, so they are counted as
// the file's size: the most the kernel can read of it).
func (r *Reader) NotePassthrough() {
	r.c.st.ptOpens.Add(1)
	r.mu.Lock()
	cold := r.cold != nil
	r.mu.Unlock()
	if cold {
		r.c.st.coldOpens.Add(1)
	}
	r.c.st.ptBytes.Add(r.o.ref.Size)
	r.c.stageRead(r.o.ref, 0, r.o.ref.Size, waitNone)
}
