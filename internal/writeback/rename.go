package writeback

import (
	"os"
	"syscall"
	"time"
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
	m.uploaded.forget(from)
	f := m.lockForRename(from)
	if f == nil {
		return syscall.ENOENT
	}
	replaced := m.files[to]
	if replaced != nil && replaced != f {
		m.unlinkLocked(replaced)
	}
	m.delFileLocked(from)
	m.setFileLocked(to, f)
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
		m.mu.Lock()
		f := m.files[from]
		if f == nil {
			f = m.recentDropLocked(from)
		}
		m.mu.Unlock()
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

// recentDrop is a file dropped at a time (see Manager.recent).
type recentDrop struct {
	f  *File
	at time.Time
}

// Bounds of Manager.recent: entries older than recentTTL are ignored, and
// the map is cleared when it holds maxRecent.
const (
	recentTTL = 2 * time.Second
	maxRecent = 1024
)

// noteDropLocked remembers f, just dropped at its name. Caller holds m.mu.
func (m *Manager) noteDropLocked(f *File) {
	if len(m.recent) >= maxRecent {
		clear(m.recent)
	}
	m.recent[f.target] = recentDrop{f: f, at: m.cfg.Now()}
}

// recentDropLocked returns the file dropped at t a moment ago, if no
// other file lives there since. Caller holds m.mu.
func (m *Manager) recentDropLocked(t Target) *File {
	r, ok := m.recent[t]
	if !ok || m.files[t] != nil || m.cfg.Now().Sub(r.at) > recentTTL {
		return nil
	}
	return r.f
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
	frozen := f.ext.frozen
	if !stub && f.live {
		f.live = false
		f.unindexLocked()
		delete(m.byID, f.id)
	}
	if m.files[f.target] == f {
		m.delFileLocked(f.target)
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
		if frozen {
			m.keepFrozen(f.id)
		} else {
			os.Remove(m.j.dataPath(f.id))
		}
	} else if frozen {
		m.keepFrozen(f.id)
	} else if err := m.j.remove(f.id); err != nil {
		m.log.Warn("writeback: remove staging", "id", f.id, "err", err)
	}
	f.jmu.Unlock()
	if stub {
		f.kick()
	}
	m.notify()
}
