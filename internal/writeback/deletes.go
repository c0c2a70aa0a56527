package writeback

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

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
// before the upload's claim on t ends. An attempt whose object already
// landed as the file's own (the file was removed after: Sync returns
// before the claim ends) leaves no stray. Caller holds m.mu.
func (m *Manager) strayLocked(t Target) bool {
	u := m.uploading[t]
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return (u.removed || u.target != t) && !u.landed
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
	if err := m.sched.acquire(ctx, classLight); err != nil {
		return err
	}
	defer m.sched.release(classLight)
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

// cancelDeletesLocked drops t from every other file's delete-after list (a
// new file now lives there) and returns the files whose records changed.
func (m *Manager) cancelDeletesLocked(t Target, except *File) []*File {
	if m.delKeys[t] == 0 {
		return nil
	}
	var changed []*File
	for _, g := range m.byID {
		if g == except {
			continue
		}
		g.mu.Lock()
		if g.target.sameBucket(t) {
			var kept []deleteRec
			for _, d := range g.deleteAfter {
				if d.Key != t.Key {
					kept = append(kept, d)
				}
			}
			if len(kept) != len(g.deleteAfter) {
				m.setDeletesLocked(g, kept)
				changed = append(changed, g)
			}
		}
		g.mu.Unlock()
	}
	return changed
}

// setDeletesLocked replaces f's deleteAfter list, keeping m.delKeys up to
// date. Caller holds m.mu and f.mu (or runs in New).
func (m *Manager) setDeletesLocked(f *File, list []deleteRec) {
	for _, d := range f.deleteAfter {
		t := Target{Scheme: f.target.Scheme, Bucket: f.target.Bucket, Key: d.Key}
		if m.delKeys[t]--; m.delKeys[t] <= 0 {
			delete(m.delKeys, t)
		}
	}
	for _, d := range list {
		m.delKeys[Target{Scheme: f.target.Scheme, Bucket: f.target.Bucket, Key: d.Key}]++
	}
	f.deleteAfter = list
}
