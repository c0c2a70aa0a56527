package writeback

import (
	"context"
	"errors"
	"os"
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
	f := m.Get(from)
	if f == nil {
		return syscall.ENOENT
	}
	f.jmu.Lock()
	m.mu.Lock()
	if m.files[from] != f {
		m.mu.Unlock()
		f.jmu.Unlock()
		return syscall.ENOENT
	}
	replaced := m.files[to]
	delete(m.files, from)
	m.files[to] = f
	rewrite := m.cancelDeletesLocked(to, f)
	f.mu.Lock()
	f.cancelAttemptLocked()
	f.abortStreamLocked()
	var kept []deleteRec
	if f.base != nil && f.base.Key == from.Key {
		kept = append(kept, deleteRec{Key: from.Key, Version: f.base.Version})
	}
	for _, d := range f.deleteAfter {
		if d.Key != to.Key && d.Key != from.Key {
			kept = append(kept, d)
		}
	}
	f.deleteAfter = kept
	f.target = to
	f.touchLocked()
	closed := f.refs == 0
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
	f.cancelAttemptLocked()
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
	if m.files[t] != nil {
		return false
	}
	for _, f := range m.byID {
		f.mu.Lock()
		found := false
		if f.target.sameBucket(t) {
			for _, d := range f.deleteAfter {
				found = found || d.Key == t.Key
			}
		}
		f.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}

// PendingDeletes returns the keys under prefix that PendingDelete hides,
// sorted.
func (m *Manager) PendingDeletes(scheme, bucket, prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range m.byID {
		f.mu.Lock()
		if f.target.Scheme == scheme && f.target.Bucket == bucket {
			for _, d := range f.deleteAfter {
				if strings.HasPrefix(d.Key, prefix) && m.files[Target{scheme, bucket, d.Key}] == nil {
					seen[d.Key] = true
				}
			}
		}
		f.mu.Unlock()
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
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
		if err := m.detachDependents(ctx, t, f); err != nil {
			return err
		}
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
		err := m.deleteVersion(ctx, st, t, d.Version)
		m.mu.Lock()
		if m.deleting[t]--; m.deleting[t] <= 0 {
			delete(m.deleting, t)
		}
		m.mu.Unlock()
		m.notify()
		if err != nil {
			return err
		}
		f.mu.Lock()
		if len(f.deleteAfter) > 0 && f.deleteAfter[0] == d {
			f.deleteAfter = f.deleteAfter[1:]
		}
		f.mu.Unlock()
		if err := f.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", t.String(), "err", err)
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
		if err := g.materialize(ctx); err != nil {
			return err
		}
	}
	return nil
}

// materialize copies the base's clean bytes into the staging file and
// drops the base.
func (f *File) materialize(ctx context.Context) error {
	for {
		f.mu.Lock()
		if f.base == nil || f.removed {
			f.mu.Unlock()
			return nil
		}
		f.cancelAttemptLocked() // its CopyParts would read the base
		base, t := *f.base, f.target
		gaps := f.valid.gaps(0, min(f.baseLimit, f.size))
		if len(gaps) == 0 {
			f.base, f.baseLimit, f.dirty = nil, 0, nil
			f.mu.Unlock()
			return f.writeRecord()
		}
		f.mu.Unlock()
		st, err := f.m.resolve(ctx, t.Scheme, t.Bucket)
		if err != nil {
			return err
		}
		if err := f.fill(ctx, st, base, gaps); err != nil && !errors.Is(err, errBaseChanged) {
			return err
		}
	}
}

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
	err := m.detachDependents(ctx, t, nil)
	if err == nil {
		err = m.deleteVersion(ctx, st, t, version)
	}
	if err != nil && m.ctx.Err() == nil {
		m.log.Warn("writeback: could not delete an object left under a renamed or removed name", "path", t.String(), "err", err)
	}
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
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		m.log.Info("writeback: object changed since; not deleting it", "path", t.String())
		return nil
	case errors.Is(err, objstore.ErrNotFound):
		return nil
	}
	return err
}
