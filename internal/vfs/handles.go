package vfs

import (
	"context"
	"strings"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Open handles follow their file, as a descriptor does in POSIX: a rename
// moves them to the new name, and an unlink (or a rename over the name)
// leaves them reading and writing the bytes they had. The FS keeps every
// open handle in FS.open, by name, so that Rename and Unlink find them.

// where returns the handle's current name and whether the file still has
// it (false after an unlink or a rename over it).
func (h *Handle) where() (Loc, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loc, !h.unlinked
}

// reader returns the clean reader of the handle (nil for dirty files).
func (h *Handle) reader() *block.Reader {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rd
}

// dirty returns the dirty file the handle reads: its own (opened on a
// dirty file or for writing), else, for a clean handle, the dirty file of
// its name (the same file, written through another handle), which it
// keeps following once that file is durable and dropped (its reads then
// go to the version it uploaded); nil when the file is clean. A clean
// handle takes no reference on the file while the name is linked (that
// would hold back the upload as if a writer had it open); orphanHandles
// takes one when the name goes.
func (h *Handle) dirty() *writeback.File {
	if h.wf != nil {
		return h.wf
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unlinked {
		return h.follow
	}
	if f := h.fs.deps.Writeback.Get(h.loc.target()); f != nil {
		h.follow = f
	}
	return h.follow
}

// adoptAt makes the clean handles open at l follow the dirty file f, which
// was just made of the same file (an open for writing, a truncate).
func (fs *FS) adoptAt(l Loc, f *writeback.File) {
	for _, h := range fs.handlesAt(l) {
		if h.wf != nil {
			continue
		}
		h.mu.Lock()
		if !h.unlinked {
			h.follow = f
		}
		h.mu.Unlock()
	}
}

// keepSnapshots completes, before a local change to l (an open for
// writing, a truncate, a chmod) can replace the version in the bucket,
// the cache files the clean passthrough handles at l read: the kernel
// reads them, and with cold passthrough they may still have holes that
// only that version can fill. A handle that cannot keep it (the version
// is gone already) fails its reads there (EIO).
func (fs *FS) keepSnapshots(ctx context.Context, l Loc) {
	for _, h := range fs.passthroughAt(l) {
		h.CompleteBacking(ctx)
	}
}

// keepSnapshotsUnder is keepSnapshots for l and, when l is a directory,
// every name below it: before a rename moves (copies, then deletes) the
// objects those handles read.
func (fs *FS) keepSnapshotsUnder(ctx context.Context, l Loc) {
	k := l.cacheKey()
	fs.hmu.Lock()
	var ls []Loc
	for name, set := range fs.open {
		rest, ok := strings.CutPrefix(name, k)
		if !ok || (rest != "" && rest[0] != '/') || len(set) == 0 {
			continue
		}
		for h := range set {
			ls = append(ls, h.loc)
			break
		}
	}
	fs.hmu.Unlock()
	for _, l := range ls {
		fs.keepSnapshots(ctx, l)
	}
}

// CompleteBackings makes whole the cache files that the passthrough
// handles open at p read (p as Open takes it): before a mapping of one
// of them can read a hole (the kernel asks ferry before the reads of a
// file it passes through cold, not before the faults of its mappings).
func (fs *FS) CompleteBackings(ctx context.Context, p string) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	for _, h := range fs.passthroughAt(l) {
		if err := h.CompleteBacking(ctx); err != nil {
			return err
		}
	}
	return nil
}

// passthroughAt returns the clean handles open at l whose reads pass
// through.
func (fs *FS) passthroughAt(l Loc) []*Handle {
	var out []*Handle
	for _, h := range fs.handlesAt(l) {
		if h.wf != nil {
			continue
		}
		h.mu.Lock()
		ok := h.pt && !h.unlinked && h.rd != nil && h.ref.Size > 0
		h.mu.Unlock()
		if ok {
			out = append(out, h)
		}
	}
	return out
}

// Attr is what fstat shows of the open file: the dirty file it writes,
// else the name's attributes while the file still has its name, else
// the attributes the file had when it was opened (it was unlinked).
func (h *Handle) Attr(ctx context.Context) (Attr, error) {
	l, linked := h.where()
	if f := h.dirty(); f != nil {
		a := h.fs.fileAttr(f)
		a.Unlinked = !linked
		return a, nil
	}
	if linked {
		a, err := h.fs.getattr(ctx, l)
		switch {
		case err == nil && a.Kind == meta.KindFile:
			return a, nil
		case err != nil && !errIs(err, syscall.ENOENT) && !errIs(err, objstore.ErrNotFound):
			return Attr{}, err
		}
	}
	a := h.attr
	a.Unlinked = !linked
	return a, nil
}

// track registers an open handle under its name.
func (fs *FS) track(h *Handle) {
	k := h.loc.cacheKey()
	fs.hmu.Lock()
	defer fs.hmu.Unlock()
	set := fs.open[k]
	if set == nil {
		set = map[*Handle]struct{}{}
		fs.open[k] = set
	}
	set[h] = struct{}{}
}

// untrack forgets a closed handle.
func (fs *FS) untrack(h *Handle) {
	fs.hmu.Lock()
	defer fs.hmu.Unlock()
	h.mu.Lock()
	k, gone := h.loc.cacheKey(), h.unlinked
	h.mu.Unlock()
	if gone {
		return
	}
	if set := fs.open[k]; set != nil {
		delete(set, h)
		if len(set) == 0 {
			delete(fs.open, k)
		}
	}
}

// handlesAt returns the open handles of the file named l.
func (fs *FS) handlesAt(l Loc) []*Handle {
	fs.hmu.Lock()
	defer fs.hmu.Unlock()
	var out []*Handle
	for h := range fs.open[l.cacheKey()] {
		out = append(out, h)
	}
	return out
}

// moveHandles renames the handles of src (and, for a directory, of every
// name below it) to dst. A clean handle of a moved object (moved maps its
// old key to the object's info under the new key) reads the new object
// from then on: the old one is deleted.
func (fs *FS) moveHandles(src, dst Loc, moved map[string]objstore.ObjectInfo) {
	sk, dk := src.cacheKey(), dst.cacheKey()
	fs.hmu.Lock()
	defer fs.hmu.Unlock()
	for k, set := range fs.open {
		rest, ok := strings.CutPrefix(k, sk)
		if !ok || (rest != "" && rest[0] != '/') {
			continue
		}
		delete(fs.open, k)
		nk := dk + rest
		nset := fs.open[nk]
		if nset == nil {
			nset = map[*Handle]struct{}{}
			fs.open[nk] = nset
		}
		for h := range set {
			nset[h] = struct{}{}
			h.mu.Lock()
			old := h.loc.Key
			h.loc = Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: dst.Key + rest}
			h.mu.Unlock()
			if info, ok := moved[old]; ok {
				h.retarget(info)
			}
		}
	}
}

// retarget makes a clean handle read the object info, what the rename
// moved from the handle's name, instead of the version it opened: the
// handle is still registered at that name, so the file there is its file
// (a file that replaced it would have orphaned it, see orphanHandles). The
// moved object may be a newer version than the one opened: the file was
// rewritten through another descriptor and uploaded since (the handle may
// have followed that dirty file, now dropped, whose reads go to the old
// key the rename deletes; or it never looked at it). Either way its bytes
// and size are the moved object's.
func (h *Handle) retarget(info objstore.ObjectInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rd == nil || info.Version == "" {
		return
	}
	if !h.held {
		h.follow = nil
	}
	h.attr.Size = info.Size
	st := h.ref.Store
	h.old = append(h.old, h.rd)
	h.ref = block.Ref{Store: st, StoreID: h.ref.StoreID, Key: info.Key, Version: info.Version, Size: info.Size}
	h.rd = h.fs.deps.Blocks.Open(h.ref)
}

// orphanHandles is called before the object or dirty file at l is deleted
// or replaced (unlink, rename over l): the handles open on it keep their
// bytes. Clean handles get the whole object into the block cache first.
// A dirty file that reads clean bytes from an object (its base: the
// object at l, or at an old name of the file that writeback deletes once
// the file is durable, which now never comes) copies them into its
// staging file first (writeback Detach); such old names are deleted here.
// The handles are then forgotten by name.
func (fs *FS) orphanHandles(ctx context.Context, l Loc) error {
	hs := fs.handlesAt(l)
	if len(hs) == 0 {
		return nil
	}
	wb := fs.deps.Writeback
	keys := append([]string{l.Key}, wb.PendingDeletes(l.Scheme, l.Bucket, "")...)
	bases := map[string]bool{}
	for _, h := range hs {
		if f := h.dirty(); f != nil {
			if h.wf == nil {
				h.mu.Lock()
				if !h.held {
					f.Acquire() // keeps the staged bytes once the file is removed
					h.held = true
				}
				h.mu.Unlock()
			}
			for _, k := range keys {
				if f.HasBase(k) {
					bases[k] = true
				}
			}
			continue
		}
		h.mu.Lock()
		ref, rd, pt := h.ref, h.rd, h.pt
		h.mu.Unlock()
		if rd == nil || ref.Size == 0 {
			continue
		}
		var err error
		if pt {
			// It reads its own cache file (passthrough; maybe opened cold).
			err = rd.CompleteBacking(ctx)
		} else {
			err = fs.deps.Blocks.Prefetch(ctx, ref, nil)
		}
		if err != nil {
			fs.logErr("keep unlinked", l, err)
			if !errIs(err, objstore.ErrPrecondition) && !errIs(err, objstore.ErrNotFound) {
				return err
			}
			// That version is gone already: the handle cannot keep it
			// (its reads fail with ESTALE); the unlink goes on.
		}
	}
	for k := range bases {
		t := Loc{Scheme: l.Scheme, Bucket: l.Bucket, Key: k}
		if err := wb.Detach(ctx, t.target()); err != nil {
			return err
		}
		if k == l.Key {
			continue // the caller deletes or replaces it
		}
		// Detach dropped writeback's delete of this old name: do it now.
		st, err := fs.store(ctx, t)
		if err != nil {
			return err
		}
		if err := st.Delete(ctx, k, objstore.DeleteOptions{}); err != nil {
			fs.logErr("unlink", t, err)
			return err
		}
	}
	fs.hmu.Lock()
	delete(fs.open, l.cacheKey())
	for _, h := range hs {
		h.mu.Lock()
		h.unlinked = true
		h.mu.Unlock()
	}
	fs.hmu.Unlock()
	return nil
}
