package writeback

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// errCanceled is the cause of an attempt cancelled by Rename or Remove.
var errCanceled = errors.New("writeback: upload cancelled by a rename or remove")

// snapshot is what one upload attempt uploads.
type snapshot struct {
	gen, metaGen uint64
	target       Target
	size         int64
	symlink      string
	hasData      bool
	base         *objstore.ObjectInfo
	baseLimit    int64
	dirty        rangeSet
	md           map[string]string
	stream       *stream
	stale        []uploadRec // multipart uploads to abort first
}

func (f *File) snapshotLocked() snapshot {
	s := snapshot{
		gen: f.gen, metaGen: f.metaGen, target: f.target, size: f.size,
		symlink: f.symlink, hasData: f.hasData, baseLimit: f.baseLimit,
		dirty: f.dirty.clone(), md: f.metadataLocked(), stream: f.stream,
	}
	if f.base != nil {
		b := *f.base
		s.base = &b
	}
	for _, u := range f.uploads {
		if !u.owned {
			s.stale = append(s.stale, u)
		}
	}
	return s
}

// kick makes sure the upload loop runs (and retries now if it waits).
func (f *File) kick() {
	f.mu.Lock()
	f.final = false
	if f.uploading {
		select {
		case f.kickCh <- struct{}{}:
		default:
		}
		f.mu.Unlock()
		return
	}
	f.uploading = true
	f.mu.Unlock()
	if !f.m.goFn(f.uploadLoop) {
		f.mu.Lock()
		f.uploading = false
		f.mu.Unlock()
	}
}

// wantsLocked says whether the data must be uploaded now, and whether
// there is cleanup (stale multipart uploads, deletes of old names). The
// data is uploaded once every modification was followed by a close (handles
// that only read do not hold it back), or when Sync asks for it.
func (f *File) wantsLocked() (data, cleanup bool) {
	if !f.live {
		return false, false
	}
	data = !f.removed && f.gen > f.durableGen && (f.closedGen == f.gen || f.syncGen > f.durableGen)
	for _, u := range f.uploads {
		cleanup = cleanup || !u.owned
	}
	if len(f.deleteAfter) > 0 && (f.removed || f.gen == f.durableGen) {
		cleanup = true
	}
	return data, cleanup
}

// uploadLoop uploads the file until it is durable (retrying with backoff),
// fails with a final error, is removed, or the manager closes.
func (f *File) uploadLoop() {
	m := f.m
	backoff := m.cfg.RetryMin
	for {
		f.mu.Lock()
		data, cleanup := f.wantsLocked()
		if data && f.corrupt != nil {
			f.lastErr, f.failedGen, f.final = f.corrupt, f.gen, true
			data = false
		}
		if f.final || (!data && !cleanup) {
			f.uploading = false
			f.mu.Unlock()
			f.tryFinish()
			m.notify()
			return
		}
		f.mu.Unlock()
		if data && !f.waitEligible() {
			f.stopLoop()
			return
		}
		gen, err := f.attempt(data)
		switch {
		case err == nil:
			backoff = m.cfg.RetryMin
			continue
		case m.ctx.Err() != nil:
			f.stopLoop()
			return
		case errors.Is(err, errCanceled):
			continue
		}
		final := !objstore.Retryable(err)
		f.mu.Lock()
		f.lastErr, f.failedGen, f.final = err, gen, final
		close(f.done)
		f.done = make(chan struct{})
		t := f.target
		f.mu.Unlock()
		m.notify()
		if final {
			m.failures.Add(1)
			m.log.Warn("writeback: upload failed", "path", t.String(), "err", err)
			f.stopLoop()
			return
		}
		m.retries.Add(1)
		m.log.Debug("writeback: upload failed, retrying", "path", t.String(), "err", err, "in", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-f.kickCh:
			timer.Stop()
		case <-m.ctx.Done():
			timer.Stop()
			f.stopLoop()
			return
		}
		backoff = min(backoff*2, m.cfg.RetryMax)
	}
}

func (f *File) stopLoop() {
	f.mu.Lock()
	f.uploading = false
	f.mu.Unlock()
	f.m.notify()
}

// waitEligible waits until the file may upload: no delete of its key is in
// flight and, for an OrderLast key, every other dirty file of its
// directory is durable. False when the manager closes.
func (f *File) waitEligible() bool {
	m := f.m
	for {
		ch := m.changedCh()
		if m.eligible(f) {
			return true
		}
		select {
		case <-ch:
		case <-m.ctx.Done():
			return false
		}
		// Rate-limit rescans of a large directory.
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-m.ctx.Done():
			t.Stop()
			return false
		}
	}
}

// eligible reports whether f may upload now (see waitEligible).
func (m *Manager) eligible(f *File) bool {
	f.mu.Lock()
	t, removed := f.target, f.removed
	f.mu.Unlock()
	if removed {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleting[t] > 0 {
		return false
	}
	if m.cfg.OrderLast == nil || !m.cfg.OrderLast(t.Key) {
		return true
	}
	dir := t.dir()
	for u, g := range m.files {
		if g == f || !u.sameBucket(t) || u.dir() != dir || m.cfg.OrderLast(u.Key) {
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

// attempt runs one upload attempt; it returns the generation it covered.
func (f *File) attempt(data bool) (uint64, error) {
	ctx, cancel := context.WithCancelCause(f.m.ctx)
	defer cancel(nil)
	f.mu.Lock()
	f.cancel = cancel
	snap := f.snapshotLocked()
	f.truncMin = snap.size
	f.mu.Unlock()
	err := f.runAttempt(ctx, snap, data)
	f.mu.Lock()
	f.cancel = nil
	f.mu.Unlock()
	if err != nil && errors.Is(context.Cause(ctx), errCanceled) {
		err = errCanceled
	}
	return snap.gen, err
}

// cancelAttemptLocked cancels the running attempt, if any.
func (f *File) cancelAttemptLocked() {
	if f.cancel != nil {
		f.cancel(errCanceled)
	}
}

func (f *File) runAttempt(ctx context.Context, snap snapshot, data bool) error {
	m := f.m
	st, err := m.resolve(ctx, snap.target.Scheme, snap.target.Bucket)
	if err != nil {
		return err
	}
	if err := f.abortStale(ctx, st, snap.stale); err != nil {
		return err
	}
	if data {
		if err := m.detachDependents(ctx, snap.target, f); err != nil {
			return err
		}
		info, err := f.upload(ctx, st, snap)
		if err != nil {
			return err
		}
		if !f.commit(snap, info) {
			// Renamed or removed while the upload ran, which landed anyway:
			// the object is a stray under a name the file no longer has.
			m.deleteStray(st, snap.target, info.Version)
			return errCanceled
		}
	}
	if err := f.runDeletes(ctx, st); err != nil {
		return err
	}
	if !f.tryFinish() {
		if err := f.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", snap.target.String(), "err", err)
		}
	}
	return nil
}

// commit records a successful upload of snap. The staged bytes equal the
// new object in every range not written since the snapshot, so the object
// becomes the file's base. It returns false, recording nothing, when the
// file was renamed or removed during the upload.
func (f *File) commit(snap snapshot, info objstore.ObjectInfo) bool {
	f.mu.Lock()
	if f.removed || !f.live || f.target != snap.target {
		f.mu.Unlock()
		return false
	}
	f.durableGen = max(f.durableGen, snap.gen)
	f.version = info.Version
	if f.hasData {
		f.base = &objstore.ObjectInfo{Key: snap.target.Key, Version: info.Version, Size: snap.size, Metadata: snap.md}
		f.baseLimit = min(snap.size, f.truncMin)
		if f.gen == snap.gen {
			f.dirty = nil
		}
	}
	f.lastErr, f.final = nil, false
	close(f.done)
	f.done = make(chan struct{})
	f.mu.Unlock()
	f.m.uploadedObjects.Add(1)
	f.m.notify()
	return true
}

// tryFinish forgets a file with nothing left to do: durable and released
// (its staging is deleted; a stale pointer that writes again brings it
// back), or removed with no cleanup left. It reports whether it did.
func (f *File) tryFinish() bool {
	m := f.m
	f.jmu.Lock()
	defer f.jmu.Unlock()
	m.mu.Lock()
	f.mu.Lock()
	ok := f.live && f.stream == nil && len(f.deleteAfter) == 0 && len(f.uploads) == 0 &&
		(f.removed || (f.refs == 0 && f.gen == f.durableGen))
	if ok {
		f.live = false
		f.dropped = !f.removed && f.hasData
		delete(m.byID, f.id)
		if m.files[f.target] == f {
			delete(m.files, f.target)
		}
		if f.fd != nil && f.refs == 0 {
			f.fd.Close()
			f.fd = nil
		}
		f.journaled = ""
	}
	f.mu.Unlock()
	m.mu.Unlock()
	if ok {
		if err := m.forget(f.id); err != nil {
			m.log.Warn("writeback: remove staging", "id", f.id, "err", err)
		}
		m.notify()
	}
	return ok
}

// Sync makes the file durable now (fsync), even while handles are open,
// and returns the error of the upload attempt if it fails. A removed file
// syncs trivially.
func (f *File) Sync(ctx context.Context) error {
	f.mu.Lock()
	if !f.live || f.removed || f.gen == f.durableGen {
		f.mu.Unlock()
		return nil
	}
	g := f.gen
	f.syncGen = max(f.syncGen, g)
	f.mu.Unlock()
	f.kick()
	for {
		f.mu.Lock()
		switch {
		case !f.live || f.removed || f.durableGen >= g:
			f.mu.Unlock()
			return nil
		case f.lastErr != nil && f.failedGen >= g:
			err := f.lastErr
			f.mu.Unlock()
			return err
		}
		done := f.done
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
