package writeback

import (
	"context"
	"errors"
)

// Detach prepares the object at t for an overwrite or delete outside
// writeback (a server-side copy onto t, an unlink of t), after the caller
// removed any dirty file at t (Remove): it waits until no upload of
// writeback to t is in flight (one cancelled by a rename or remove may
// still land, and is then deleted), makes every dirty file that still
// reads clean bytes from the object (its base: a file opened on t and
// renamed away, for example) independent of it, by copying those bytes
// into its staging file, drops a pending delete of t (see PendingDelete),
// the caller now owning that name, and waits for a delete of t already
// in flight to end. Writeback does the same
// itself before its own uploads and deletes. It returns ctx's error, or
// the error of reading a base (objstore.ErrPrecondition when t changed).
func (m *Manager) Detach(ctx context.Context, t Target) error {
	if err := m.waitNoUpload(ctx, t); err != nil {
		return err
	}
	if err := m.detachDependents(ctx, t, nil); err != nil {
		return err
	}
	m.mu.Lock()
	rewrite := m.cancelDeletesLocked(t, nil)
	m.mu.Unlock()
	for _, g := range rewrite {
		if err := g.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", g.Target().String(), "err", err)
		}
	}
	m.notify()
	// A delete of t already sent is not cancelled: it must end before the
	// caller writes t, or it could delete what the caller wrote (a delete
	// guarded by version is a HEAD then a DELETE on stores that ignore
	// If-Match on deletes).
	_, err := m.waitNoDelete(ctx, t)
	// The object at t changes outside writeback: what this manager's last
	// upload there stored no longer tells its metadata (a copy keeps the
	// version, an ETag, of the same bytes).
	m.uploaded.forget(t)
	return err
}

// waitNoUpload waits until no upload attempt holds a claim on t.
func (m *Manager) waitNoUpload(ctx context.Context, t Target) error {
	for {
		ch := m.changedCh()
		m.mu.Lock()
		busy := m.uploading[t] != nil
		m.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// detachDependents makes every other live file whose base is the object
// at t independent of it (its clean bytes are copied into its staging
// file), before t is overwritten or deleted.
func (m *Manager) detachDependents(ctx context.Context, t Target, except *File) error {
	var deps []*File
	for _, g := range m.bases.files(t.Key) {
		g.mu.Lock()
		if g != except && g.live && dependsLocked(g, t) {
			deps = append(deps, g)
		}
		g.mu.Unlock()
	}
	if checkBaseIndex {
		m.checkDeps(t, except, deps)
	}
	for _, g := range deps {
		if err := g.materialize(ctx, t.Key); err != nil {
			return err
		}
	}
	return nil
}

// dependsLocked reports whether g reads clean bytes from the object at t.
// Caller holds g.mu.
func dependsLocked(g *File, t Target) bool {
	return !g.removed && g.hasData && g.base != nil && g.base.Key == t.Key && g.target.sameBucket(t)
}

// checkDeps panics unless deps holds every live file a scan finds to
// depend on t (see checkBaseIndex).
func (m *Manager) checkDeps(t Target, except *File, deps []*File) {
	found := map[*File]bool{}
	for _, g := range deps {
		found[g] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.byID {
		g.mu.Lock()
		missed := g != except && dependsLocked(g, t) && !found[g]
		g.mu.Unlock()
		if missed {
			panic("writeback: base index misses a file reading from " + t.String())
		}
	}
}

// materialize copies the clean bytes of the base at key into the staging
// file and drops the base. It does nothing when the file's base is not (or
// no longer) at key, or the file was removed or dropped meanwhile.
func (f *File) materialize(ctx context.Context, key string) error {
	for {
		f.mu.Lock()
		if f.base == nil || f.base.Key != key || f.removed || !f.live {
			f.mu.Unlock()
			return nil
		}
		base, t := *f.base, f.target
		gaps := f.valid.gaps(0, min(f.baseLimit, f.size))
		if len(gaps) == 0 {
			// dirty stays: an attempt in flight may still rebase the file
			// on its snapshot, and must then find every change since.
			f.setBaseLocked(nil)
			f.baseLimit = 0
			f.mu.Unlock()
			// An attempt started during the fill may hold the base in its
			// snapshot: it must have ended (or be past its last read of
			// the base: a stalled Put from the staging file is not waited
			// for) before the caller overwrites or deletes the object.
			if err := f.endBaseReads(ctx, errDetached); err != nil {
				return err
			}
			return f.writeRecord()
		}
		// Its CopyParts read the base: stop them early (the wait is at
		// the end, for every attempt that may have read the base).
		f.cancelAttemptLocked(errDetached)
		f.mu.Unlock()
		st, err := f.m.resolve(ctx, t.Scheme, t.Bucket)
		if err != nil {
			return err
		}
		if err := f.fill(ctx, st, base, gaps); err != nil && !errors.Is(err, errBaseChanged) {
			f.mu.Lock()
			changed := !sameBase(f.base, &base) || f.removed || !f.live
			f.mu.Unlock()
			if !changed { // else the file no longer reads that base
				return err
			}
		}
	}
}
