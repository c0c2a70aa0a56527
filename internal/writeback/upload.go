package writeback

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Causes of a cancelled attempt: errCanceled when the file was renamed or
// removed (its result is never recorded: the name it was for is not the
// file's, and the caller may have deleted it), errDetached when its base is
// being detached (a result that lands is recorded as usual).
var (
	errCanceled = errors.New("writeback: upload cancelled by a rename or remove")
	errDetached = errors.New("writeback: upload cancelled: its base is being detached")
)

// permanentAttempts is how many attempts in a row may fail with a final
// error (see objstore.Retryable) before the upload loop gives up.
const permanentAttempts = 3

// errAbortsLeft ends an attempt that did everything else but abort a
// multipart upload (see settleAbort). It is final: the upload loop stops
// until kicked again (Drain kicks it once more); a record keeps the
// upload for the next process.
var errAbortsLeft = errors.New("writeback: a multipart upload could not be aborted yet")

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
	f.absorbLocked()
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
	f.kicks++
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
	cleanup = cleanup || len(f.verify) > 0 || len(f.orphans) > 0
	if len(f.deleteAfter) > 0 && (f.removed || f.gen == f.durableGen) {
		cleanup = true
	}
	return data, cleanup
}

// uploadLoop uploads the file until it is durable (retrying with backoff),
// fails with a final error, is removed, or the manager closes. Whether to
// stop is decided only under f.mu together with clearing f.uploading, so
// that a kick is never lost: it either finds the loop running and before
// that decision, or starts a new one.
func (f *File) uploadLoop() {
	m := f.m
	backoff := m.cfg.RetryMin
	permanent := 0 // attempts in a row that failed with a final error
	for {
		f.mu.Lock()
		data, cleanup := f.wantsLocked()
		if data && f.corrupt != nil {
			f.lastErr, f.failedGen, f.final, f.finalKicks = f.corrupt, f.gen, true, f.kicks
			data = false
		}
		if (f.final && f.kicks == f.finalKicks) || (!data && !cleanup) {
			f.uploading = false
			f.mu.Unlock()
			f.tryFinish()
			m.notify()
			return
		}
		kicks := f.kicks
		f.mu.Unlock()
		// Wait for the attempt's turn (the task may be busy writing).
		tk, err := m.sched.start(m.ctx)
		if err != nil {
			f.stopLoop()
			return
		}
		var key Target
		if data {
			var claimed, closing bool
			if key, claimed, closing = f.waitEligible(tk); closing {
				f.stopLoop()
				return
			}
			if !claimed {
				tk.done()
				continue // no longer wanted (removed, renamed): decide again
			}
		}
		gen, err := f.attempt(data, key, tk)
		tk.done()
		switch {
		case err == nil:
			backoff, permanent = m.cfg.RetryMin, 0
			continue
		case m.ctx.Err() != nil:
			f.stopLoop()
			return
		case errors.Is(err, errCanceled):
			continue
		}
		// A final error (the backend refuses: 4xx) is retried a few
		// times all the same (a permission being granted, a transient
		// refusal), then reported; transient ones are retried until the
		// drain's deadline.
		if !objstore.Retryable(err) {
			permanent++
		}
		final := (permanent >= permanentAttempts && !objstore.Retryable(err)) || errors.Is(err, errAbortsLeft)
		f.mu.Lock()
		f.lastErr, f.failedGen, f.final, f.finalKicks = err, gen, final, kicks
		close(f.done)
		f.done = make(chan struct{})
		t := f.target
		f.mu.Unlock()
		m.notify()
		if final {
			// The top of the loop stops it, unless a kick (Sync, a new
			// change, Drain) came since the attempt began.
			if !errors.Is(err, errAbortsLeft) { // logged by settleAbort
				m.failures.Add(1)
				m.log.Warn("writeback: upload failed", "path", t.String(), "err", err)
			}
			continue
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

// attempt runs one upload attempt; it returns the generation it covered.
// With data, key is the target claimed by waitEligible, released at the
// end; a file renamed since is retried under its new name. tk is the
// attempt's turn (see sched.start).
func (f *File) attempt(data bool, key Target, tk *ticket) (uint64, error) {
	if data {
		defer f.m.releaseKey(key)
	}
	ctx, cancel := context.WithCancelCause(withTicket(f.m.ctx, tk))
	defer cancel(nil)
	f.mu.Lock()
	if want, _ := f.wantsLocked(); data && (!want || f.target != key) {
		// Removed, renamed or synced meanwhile: an upload now could land
		// over a newer file's object at key.
		f.mu.Unlock()
		return 0, errCanceled
	}
	f.cancel = cancel
	f.attemptsStarted++
	number := f.attemptsStarted
	snap := f.snapshotLocked()
	f.truncMin, f.written = snap.size, nil
	if data {
		f.landing, f.landed = snap.tagLocked(f), false
	}
	f.mu.Unlock()
	if data { // journal the tokens before anything can land
		if err := f.writeRecord(); err != nil {
			f.m.log.Warn("writeback: journal", "path", snap.target.String(), "err", err)
		}
	}
	err := f.runAttempt(ctx, snap, data)
	f.mu.Lock()
	f.cancel = nil
	if err != nil {
		// It may have landed all the same (an answer lost): the next
		// attempt checks.
		f.verify = append(f.verify, f.landing...)
	}
	f.landing = nil
	f.attemptsEnded = number
	f.written = nil
	close(f.done) // wakes readers and endAttempt waiting for the attempt to end
	f.done = make(chan struct{})
	// The base was detached or replaced while the attempt read it: what it
	// failed on is gone, so it is retried at once.
	rebased := !sameBase(f.base, snap.base)
	f.mu.Unlock()
	cause := context.Cause(ctx)
	if err != nil && (errors.Is(cause, errCanceled) || errors.Is(cause, errDetached) || errors.Is(err, errBaseChanged) || errors.Is(err, errStagedChanged) || rebased) {
		err = errCanceled
	}
	return snap.gen, err
}

// sameBase reports whether a and b name the same object version.
func sameBase(a, b *objstore.ObjectInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Key == b.Key && a.Version == b.Version
}

func (f *File) runAttempt(ctx context.Context, snap snapshot, data bool) error {
	m := f.m
	st, err := m.resolve(ctx, snap.target.Scheme, snap.target.Bucket)
	if err != nil {
		return err
	}
	if err := f.checkLandings(ctx, st); err != nil {
		return err
	}
	if err := f.abortStale(ctx, st, snap.stale); err != nil {
		return err
	}
	if err := f.abortOrphans(ctx, st); err != nil {
		return err
	}
	if data {
		if err := m.detachDependents(ctx, snap.target, f); err != nil {
			return err
		}
		info, err := f.upload(ctx, st, snap)
		if err != nil && info.Version == "" {
			return err
		}
		renamed := errors.Is(context.Cause(ctx), errCanceled)
		if ok, kept, replaced := f.commit(snap, info, err == nil, renamed); !ok || err != nil {
			// Renamed or removed while the upload ran, which landed anyway:
			// the object is a stray under a name the file no longer has.
			switch {
			case kept:
				m.retargetDeletes(snap.target, replaced, info.Version)
			case !ok:
				m.deleteStray(st, snap.target, info.Version)
			}
			if err != nil {
				return err
			}
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
	if f.staleUploads() || f.orphansLeft() {
		return errAbortsLeft
	}
	return nil
}

// commit records an upload of snap that landed as info. The staged bytes
// equal the new object in every range not written since the snapshot, so
// the object becomes the file's base; with durable (the upload succeeded,
// metadata included) the file is durable up to snap. It returns false
// when the file was renamed or removed during the upload: the object is
// then a stray the caller deletes, unless it replaced the file's own base
// (the upload was to the key the file was opened on), in which case the
// file is rebased on it and the delete pending for that key (see Rename)
// now names its version (see retargetDeletes): kept reports that, with the
// replaced version. An attempt cancelled by a rename or remove (renamed)
// counts as renamed even if the file came back to that name: the caller
// may have deleted the object meanwhile.
func (f *File) commit(snap snapshot, info objstore.ObjectInfo, durable, renamed bool) (ok, kept bool, replaced string) {
	f.mu.Lock()
	f.landing = nil // what landed is known now
	moved := renamed || f.removed || !f.live || f.target != snap.target
	if f.hasData && !moved && !durable {
		f.rebaseLocked(snap, info) // landed without all its metadata
		f.landed = true
		f.mu.Unlock()
		return true, false, ""
	}
	if moved {
		kept = !f.removed && f.live && f.hasData && f.base != nil && f.base.Key == snap.target.Key
		if kept {
			replaced = f.base.Version
			f.rebaseLocked(snap, info)
		}
		f.mu.Unlock()
		return false, kept, replaced
	}
	f.durableGen = max(f.durableGen, snap.gen)
	f.version = info.Version
	f.m.uploaded.note(snap.target, info.Version, snap.md, snap.size, info.ModTime)
	if f.hasData {
		f.rebaseLocked(snap, info)
	}
	f.lastErr, f.final = nil, false
	f.landed = true
	close(f.done)
	f.done = make(chan struct{})
	f.mu.Unlock()
	f.m.uploadedObjects.Add(1)
	f.m.notify()
	return true, false, ""
}

// rebaseLocked makes the object info, uploaded from snap, the file's base:
// its bytes equal the staged ones except where written since the
// snapshot (those stay dirty) or past a truncation since.
func (f *File) rebaseLocked(snap snapshot, info objstore.ObjectInfo) {
	f.setBaseLocked(&objstore.ObjectInfo{Key: snap.target.Key, Version: info.Version, Size: snap.size, Metadata: snap.md})
	f.baseLimit = min(snap.size, f.truncMin)
	if f.gen == snap.gen {
		f.dirty = nil
	}
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
	ok := f.live && f.stream == nil && len(f.deleteAfter) == 0 && len(f.uploads) == 0 && len(f.verify) == 0 && len(f.orphans) == 0 &&
		(f.removed || (f.refs == 0 && f.gen == f.durableGen))
	// A removed file may still have handles reading its data file.
	recycle := f.refs == 0 && !f.ext.handed
	frozen := f.ext.frozen
	if ok {
		f.live = false
		f.unindexLocked()
		f.dropped = !f.removed
		delete(m.byID, f.id)
		if m.files[f.target] == f {
			m.delFileLocked(f.target)
			if f.dropped {
				m.noteDropLocked(f)
			}
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
		if frozen {
			m.keepFrozen(f.id)
		} else if err := m.forget(f.id, recycle); err != nil {
			m.log.Warn("writeback: remove staging", "id", f.id, "err", err)
		}
		m.notify()
	}
	return ok
}

// Sync makes the file durable now (fsync), even while handles are open:
// it uploads a snapshot and returns nil once that is in the bucket, or the
// error of the upload attempt (objstore errors after the store's own
// retries), ctx's error, or an error when the manager closes first. A
// removed file syncs trivially.
func (f *File) Sync(ctx context.Context) error {
	f.mu.Lock()
	if !f.live || f.removed || f.gen == f.durableGen {
		f.mu.Unlock()
		return nil
	}
	g := f.gen
	f.syncGen = max(f.syncGen, g)
	f.mu.Unlock()
	defer f.m.sched.hurry(true)() // an fsync waits: upload at full speed
	f.kick()
	// An OrderLast file's loop may wait in waitEligible for a change: the
	// sync is one (eligibleLocked).
	f.m.notify()
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
		case <-f.m.ctx.Done():
			return errClosed
		}
	}
}

// errClosed is returned by Sync when the manager closes before the file
// is durable (its staged data stays for the next process).
var errClosed = errors.New("writeback: closed before the file was durable")
