package writeback

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Rename re-keys the dirty file at from to the name to (same bucket, else
// syscall.EXDEV; no dirty file at from: syscall.ENOENT). A dirty file at
// to is replaced. An upload in flight is cancelled and the file queued
// again under its new name. When the file reads clean bytes from the
// object at from (its base: f.HasBase(from.Key) is then true), that object
// is deleted, guarded by its version, only after the file is durable under
// to; until then PendingDelete reports from. Any other object at from is
// the caller's to delete.
func (m *Manager) Rename(from, to Target) error {
	if from == to {
		return nil
	}
	if !from.sameBucket(to) || to.Key == "" {
		return syscall.EXDEV
	}
	f := m.lockForRename(from)
	if f == nil {
		return syscall.ENOENT
	}
	replaced := m.files[to]
	if replaced != nil && replaced != f {
		m.unlinkLocked(replaced)
	}
	delete(m.files, from)
	m.files[to] = f
	rewrite := m.cancelDeletesLocked(to, f)
	depVersion, dependents := m.baseVersionLocked(from, f)
	f.mu.Lock()
	f.cancelAttemptLocked(errCanceled)
	f.abortStreamLocked()
	var kept []deleteRec
	switch {
	case f.base != nil && f.base.Key == from.Key:
		kept = append(kept, deleteRec{Key: from.Key, Version: f.base.Version})
	case dependents:
		// Other files still read from the object at from (it was renamed
		// away, and this file created at its name since): it is deleted
		// once they are detached from it, after this file is durable.
		kept = append(kept, deleteRec{Key: from.Key, Version: depVersion})
	}
	for _, d := range f.deleteAfter {
		if d.Key != to.Key && d.Key != from.Key {
			kept = append(kept, d)
		}
	}
	m.setDeletesLocked(f, kept)
	f.target = to
	wasClosed := f.closedGen == f.gen
	f.touchLocked()
	closed := f.refs == 0 || wasClosed // a name change is no unclosed write
	if closed {
		f.closedGen = f.gen
	}
	f.mu.Unlock()
	m.mu.Unlock()
	err := f.writeRecordLocked()
	f.jmu.Unlock()
	if replaced != nil && replaced != f {
		replaced.discard()
	}
	for _, g := range rewrite {
		if err := g.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", g.Target().String(), "err", err)
		}
	}
	if closed {
		f.kick()
	}
	m.notify()
	return err
}

// lockForRename returns the dirty file at from with its jmu and m.mu
// held, or nil when there is none. A file that became durable and was
// dropped meanwhile is brought back (it is renamed like a dirty file: a
// server-side copy, then the delete of from); when another file took the
// name meanwhile, that one is returned.
func (m *Manager) lockForRename(from Target) *File {
	for {
		f := m.Get(from)
		if f == nil {
			return nil
		}
		f.jmu.Lock()
		m.mu.Lock()
		f.mu.Lock()
		if f.dropped {
			f.resurrectLocked()
		}
		f.mu.Unlock()
		if m.files[from] == f {
			return f
		}
		m.mu.Unlock()
		f.jmu.Unlock()
	}
}

// retargetDeletes makes the pending deletes of the object at t at version
// old (see Rename) delete version new instead: an upload that landed there
// after its file was renamed replaced it.
func (m *Manager) retargetDeletes(t Target, old, new string) {
	var changed []*File
	m.mu.Lock()
	for _, g := range m.byID {
		g.mu.Lock()
		if g.target.sameBucket(t) {
			for i, d := range g.deleteAfter {
				if d.Key == t.Key && d.Version == old {
					g.deleteAfter[i].Version = new
					changed = append(changed, g)
				}
			}
		}
		g.mu.Unlock()
	}
	m.mu.Unlock()
	for _, g := range changed {
		if err := g.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", g.Target().String(), "err", err)
		}
	}
}

// baseVersionLocked returns the version of the object at t that live
// files other than except read from, if any. Caller holds m.mu.
func (m *Manager) baseVersionLocked(t Target, except *File) (string, bool) {
	for _, g := range m.byID {
		if g == except {
			continue
		}
		g.mu.Lock()
		dep := !g.removed && g.hasData && g.base != nil && g.base.Key == t.Key && g.target.sameBucket(t)
		var v string
		if dep {
			v = g.base.Version
		}
		g.mu.Unlock()
		if dep {
			return v, true
		}
	}
	return "", false
}

// discard forgets a file that was unlinked or replaced: its attempt is
// cancelled, its data deleted (open handles keep the unlinked data). What
// must still happen in the bucket (aborting multipart uploads, deleting the
// old names of a rename) is kept as a stub record until done.
func (f *File) discard() {
	m := f.m
	f.jmu.Lock()
	m.mu.Lock()
	f.mu.Lock()
	f.removed = true
	f.cancelAttemptLocked(errCanceled)
	f.abortStreamLocked()
	stub := f.live && (len(f.deleteAfter) > 0 || len(f.uploads) > 0)
	if !stub && f.live {
		f.live = false
		delete(m.byID, f.id)
	}
	if m.files[f.target] == f {
		delete(m.files, f.target)
	}
	if f.refs == 0 && f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
	f.mu.Unlock()
	m.mu.Unlock()
	if stub {
		if err := f.writeRecordLocked(); err != nil {
			m.log.Warn("writeback: journal", "path", f.Target().String(), "err", err)
		}
		os.Remove(m.j.dataPath(f.id))
	} else if err := m.j.remove(f.id); err != nil {
		m.log.Warn("writeback: remove staging", "id", f.id, "err", err)
	}
	f.jmu.Unlock()
	if stub {
		f.kick()
	}
	m.notify()
}

// PendingDelete reports whether t is the old name of a renamed dirty file,
// to be deleted once that file is durable: the namespace must hide it.
func (m *Manager) PendingDelete(t Target) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pendingDeleteLocked(t)
}

// pendingDeleteLocked: no file lives at t, and t is queued for deletion
// or an upload to t runs for a file that left that name (what lands is
// deleted). Caller holds m.mu.
func (m *Manager) pendingDeleteLocked(t Target) bool {
	return m.files[t] == nil && (m.delKeys[t] > 0 || m.strayLocked(t))
}

// strayLocked reports whether an upload to t runs for a file that was
// renamed away from t or removed: what it lands there is a stray, deleted
// before the upload's claim on t ends. Caller holds m.mu.
func (m *Manager) strayLocked(t Target) bool {
	u := m.uploading[t]
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.removed || u.target != t
}

// PendingDeletes returns the keys under prefix that PendingDelete hides,
// sorted.
func (m *Manager) PendingDeletes(scheme, bucket, prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for t := range m.delKeys {
		if t.Scheme == scheme && t.Bucket == bucket && strings.HasPrefix(t.Key, prefix) && m.pendingDeleteLocked(t) {
			out = append(out, t.Key)
		}
	}
	for t := range m.uploading {
		if t.Scheme == scheme && t.Bucket == bucket && strings.HasPrefix(t.Key, prefix) && m.delKeys[t] == 0 && m.pendingDeleteLocked(t) {
			out = append(out, t.Key)
		}
	}
	sort.Strings(out)
	return out
}

// runDeletes deletes the old names of a durable (or removed) file. A
// delete guarded by a version that no longer matches is skipped: someone
// else wrote that key since.
func (f *File) runDeletes(ctx context.Context, st objstore.Store) error {
	m := f.m
	for {
		f.mu.Lock()
		if len(f.deleteAfter) == 0 || !(f.removed || f.gen == f.durableGen) {
			f.mu.Unlock()
			return nil
		}
		d := f.deleteAfter[0]
		t := Target{Scheme: f.target.Scheme, Bucket: f.target.Bucket, Key: d.Key}
		f.mu.Unlock()
		// Re-check under the manager lock that the delete still stands
		// (a Create at t cancels it) and mark it in flight.
		m.mu.Lock()
		f.mu.Lock()
		still := len(f.deleteAfter) > 0 && f.deleteAfter[0] == d
		f.mu.Unlock()
		if still {
			m.deleting[t]++
		}
		m.mu.Unlock()
		if !still {
			continue
		}
		if err := m.deleteMarked(ctx, st, t, d.Version, f); err != nil {
			return err
		}
		m.mu.Lock()
		f.mu.Lock()
		if len(f.deleteAfter) > 0 && f.deleteAfter[0] == d {
			m.setDeletesLocked(f, slices.Clone(f.deleteAfter[1:]))
		}
		f.mu.Unlock()
		m.mu.Unlock()
		if err := f.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", t.String(), "err", err)
		}
	}
}

// Detach prepares the object at t for an overwrite or delete outside
// writeback (a server-side copy onto t, an unlink of t), after the caller
// removed any dirty file at t (Remove): it waits until no upload of
// writeback to t is in flight (one cancelled by a rename or remove may
// still land, and is then deleted), makes every dirty file that still
// reads clean bytes from the object (its base: a file opened on t and
// renamed away, for example) independent of it, by copying those bytes
// into its staging file, and drops a pending delete of t (see
// PendingDelete), the caller now owning that name. Writeback does the same
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
	return nil
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
	m.mu.Lock()
	var deps []*File
	for _, g := range m.byID {
		if g == except {
			continue
		}
		g.mu.Lock()
		if !g.removed && g.hasData && g.base != nil && g.base.Key == t.Key && g.target.sameBucket(t) {
			deps = append(deps, g)
		}
		g.mu.Unlock()
	}
	m.mu.Unlock()
	for _, g := range deps {
		if err := g.materialize(ctx, t.Key); err != nil {
			return err
		}
	}
	return nil
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
		f.cancelAttemptLocked(errDetached) // its CopyParts would read the base
		base, t := *f.base, f.target
		gaps := f.valid.gaps(0, min(f.baseLimit, f.size))
		if len(gaps) == 0 {
			f.base, f.baseLimit, f.dirty = nil, 0, nil
			// An attempt started during the fill may hold the base in its
			// snapshot: it must not use it once the base is gone.
			f.cancelAttemptLocked(errDetached)
			f.mu.Unlock()
			return f.writeRecord()
		}
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

// maxGone bounds Manager.gone.
const maxGone = 4096

// strayTimeout bounds the cleanup of an object that landed under a name
// its file no longer has.
const strayTimeout = time.Minute

// deleteStray deletes the object an upload wrote at t after its file was
// renamed or removed, unless t was overwritten since (the delete is
// guarded by version). It runs on the manager's context: the attempt's
// context was cancelled by the rename or remove. Failures are logged.
func (m *Manager) deleteStray(st objstore.Store, t Target, version string) {
	ctx, cancel := context.WithTimeout(m.ctx, strayTimeout)
	defer cancel()
	m.mu.Lock()
	m.deleting[t]++
	m.mu.Unlock()
	if err := m.deleteMarked(ctx, st, t, version, nil); err != nil && m.ctx.Err() == nil {
		m.log.Warn("writeback: could not delete an object left under a renamed or removed name", "path", t.String(), "err", err)
	}
}

// deleteMarked deletes the object at t at version (see deleteVersion),
// first making the files that read from it (but except) independent of it.
// The caller has counted the delete in m.deleting, which it ends: while it
// runs, no upload to t starts and OpenBase of t waits, so that no file
// comes to depend on the object between the detach and the delete.
func (m *Manager) deleteMarked(ctx context.Context, st objstore.Store, t Target, version string, except *File) error {
	defer func() {
		m.mu.Lock()
		if m.deleting[t]--; m.deleting[t] <= 0 {
			delete(m.deleting, t)
		}
		m.mu.Unlock()
		m.notify()
	}()
	if err := m.detachDependents(ctx, t, except); err != nil {
		return err
	}
	return m.deleteVersion(ctx, st, t, version)
}

// deleteVersion deletes the object at t if it still has the given version
// (any version when version is empty). A missing or changed object is not
// an error: someone else owns that name now.
func (m *Manager) deleteVersion(ctx context.Context, st objstore.Store, t Target, version string) error {
	if err := acquire(ctx, m.small); err != nil {
		return err
	}
	defer func() { <-m.small }()
	err := st.Delete(ctx, t.Key, objstore.DeleteOptions{IfVersion: version})
	if err == nil && version != "" {
		m.mu.Lock()
		if len(m.gone) >= maxGone {
			clear(m.gone)
		}
		m.gone[t] = version
		m.mu.Unlock()
	}
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		m.log.Info("writeback: object changed since; not deleting it", "path", t.String())
		return nil
	case errors.Is(err, objstore.ErrNotFound):
		return nil
	}
	return err
}
