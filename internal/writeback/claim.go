package writeback

import (
	"strings"
	"time"
)

// waitEligible waits until the file may upload: no other upload to its
// key and no delete of it is in flight (so that an upload cancelled by a
// rename or replace, which may land anyway, never lands after a newer
// one) and, for an OrderLast key, every other dirty file of its directory
// is durable. It then claims the key (see releaseKey) and returns it.
// claimed is false when the upload is no longer wanted (the file was
// removed, for example); closing when the manager closes. The attempt's
// turn tk ends if it has to wait (others may go meanwhile).
func (f *File) waitEligible(tk *ticket) (key Target, claimed, closing bool) {
	m := f.m
	for {
		ch := m.changedCh()
		t, claimed, wanted := m.claim(f)
		if claimed || !wanted {
			return t, claimed, false
		}
		tk.done()
		select {
		case <-ch:
		case <-m.ctx.Done():
			return Target{}, false, true
		}
		// Rate-limit rescans of a large directory.
		tm := time.NewTimer(10 * time.Millisecond)
		select {
		case <-tm.C:
		case <-m.ctx.Done():
			tm.Stop()
			return Target{}, false, true
		}
	}
}

// claim claims f's key for an upload if f may upload now (see
// waitEligible); wanted is false when f's data upload is no longer
// wanted. A file removed or renamed away never claims its old key, so a
// claim by a file not at its key is one it held before (see strayLocked).
func (m *Manager) claim(f *File) (t Target, claimed, wanted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f.mu.Lock()
	t = f.target
	wanted, _ = f.wantsLocked()
	f.mu.Unlock()
	if !wanted || m.uploading[t] != nil || !m.eligibleLocked(f, t) {
		return t, false, wanted
	}
	m.uploading[t] = f
	return t, true, true
}

// releaseKey ends the claim of claim.
func (m *Manager) releaseKey(t Target) {
	m.mu.Lock()
	delete(m.uploading, t)
	m.mu.Unlock()
	m.notify()
}

// eligible reports whether f may upload now, ignoring uploads in flight.
func (m *Manager) eligible(f *File) bool {
	f.mu.Lock()
	t := f.target
	f.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.eligibleLocked(f, t)
}

// eligibleLocked: no delete of t is in flight and f is not held back by
// OrderLast: until Stop or Drain (unless f is synced: an fsync must not
// wait for the task's end), and while another file under its directory
// (subdirectories included) is not durable. Caller holds m.mu.
func (m *Manager) eligibleLocked(f *File, t Target) bool {
	if m.deleting[t] > 0 {
		return false
	}
	if m.cfg.OrderLast == nil || !m.cfg.OrderLast(t.Key) {
		return true
	}
	f.mu.Lock()
	synced := f.syncGen > f.durableGen
	f.mu.Unlock()
	if !m.lastOK && !synced {
		return false
	}
	dir := t.dir()
	for u, g := range m.files {
		if g == f || !u.sameBucket(t) || !strings.HasPrefix(u.Key, dir) || m.cfg.OrderLast(u.Key) {
			continue
		}
		g.mu.Lock()
		pending := !g.removed && g.gen > g.durableGen
		g.mu.Unlock()
		if pending {
			return false
		}
	}
	return true
}
