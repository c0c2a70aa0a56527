package writeback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// smallRequest: requests carrying less than this use the small semaphore.
const smallRequest = 1 << 20

// classFor returns the scheduler class of a request carrying size bytes.
func classFor(size int64) int {
	if size >= smallRequest {
		return classHeavy
	}
	return classLight
}

// putOptions merges the configured options with the file's metadata.
func (m *Manager) putOptions(t Target, md map[string]string) objstore.PutOptions {
	var o objstore.PutOptions
	if m.cfg.PutOptions != nil {
		o = m.cfg.PutOptions(t)
	}
	merged := maps.Clone(o.Metadata)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, md)
	o.Metadata = merged
	o.IfVersion, o.IfAbsent = "", false
	return o
}

// upload uploads snap and returns the new object. An error with an object
// (a Version) means that this object landed nonetheless, with the data of
// snap but not all of its metadata.
func (f *File) upload(ctx context.Context, st objstore.Store, snap snapshot) (objstore.ObjectInfo, error) {
	m := f.m
	key := snap.target.Key
	opts := m.putOptions(snap.target, snap.md)
	if !snap.hasData {
		// A symlink or special file: its body is empty, or a symlink's
		// target when metadata cannot hold it.
		body := SymlinkBody(snap.symlink)
		return m.put(ctx, st, key, bytes.NewReader(body), int64(len(body)), opts)
	}
	if snap.stream != nil {
		if info, used, err := f.finishStream(ctx, st, snap, opts); used {
			return info, err
		}
	}
	b := snap.base
	if b != nil && len(snap.dirty) == 0 && snap.size == b.Size && snap.baseLimit == b.Size && b.Size > 0 {
		// Only the name or the metadata changed: copy on the server.
		info, err := m.copyObject(ctx, st, b.Key, key, b.Version, snap.size, opts.Metadata)
		if !errors.Is(err, objstore.ErrUnsupported) {
			return info, err
		}
	}
	caps := st.Caps()
	lay := uniformLayout(caps, m.cfg.PartSize, snap.size)
	if mp, ok := st.(objstore.Multipart); ok && snap.size > lay.size {
		info, err := f.multipart(ctx, st, mp, lay, snap, opts)
		if !errors.Is(err, errNoMultipart) {
			return info, err
		}
	}
	return f.putWhole(ctx, st, snap, opts)
}

// putWhole uploads snap with one Put from the staging file (clean bytes
// filled from the base first).
func (f *File) putWhole(ctx context.Context, st objstore.Store, snap snapshot, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	m := f.m
	if limit := st.Caps().MaxSinglePut; limit > 0 && snap.size > limit {
		return objstore.ObjectInfo{}, fmt.Errorf("writeback: %s: %d bytes exceed the backend's single-put limit: %w", snap.target, snap.size, objstore.ErrUnsupported)
	}
	if err := f.fillPart(ctx, st, snap, span{0, snap.size}); err != nil {
		return objstore.ObjectInfo{}, err
	}
	// From here on the attempt reads the staging file only: a Detach of
	// the base need not wait for the Put, which sendCtx keeps running to
	// its answer (it may stall for as long as the store does). Marked
	// under f.mu before the Put is sent, so a materialize that saw no mark
	// cancelled the attempt first, and the Put is then not sent.
	f.mu.Lock()
	f.baseReadsDone = f.attemptsStarted
	f.mu.Unlock()
	rd, err := openData(m.j.dataPath(f.id), os.O_RDONLY)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer rd.Close()
	return m.put(ctx, st, snap.target.Key, io.NewSectionReader(f.guard(rd, snap.size), 0, snap.size), snap.size, opts)
}

// put is one Put under the semaphore.
func (m *Manager) put(ctx context.Context, st objstore.Store, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	class := classFor(size)
	if err := m.sched.acquire(ctx, class); err != nil {
		return objstore.ObjectInfo{}, err
	}
	var (
		info objstore.ObjectInfo
		err  error
	)
	m.deep(func() { info, err = st.Put(m.sendCtx(ctx), key, src, size, opts) })
	m.sched.release(class)
	if err == nil {
		m.uploadedBytes.Add(size)
	}
	return info, err
}

// sendCtx is the context of a request that makes an object appear (Put,
// Complete, Copy, and CreateUpload for a multipart upload) on behalf of an attempt whose context is ctx. Once such
// a request is sent, cancelling it does not stop it from landing (the
// server may commit it after the client has gone), and an object that
// lands unseen is a stray nobody deletes. So a rename or remove does not
// cancel it: the attempt waits for the answer, and then knows what to
// delete. Only the manager's own shutdown cuts it short. If ctx is done
// already, the request is not sent.
func (m *Manager) sendCtx(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	return m.ctx
}

// fillPart copies into the staging file the base bytes of r that it lacks.
func (f *File) fillPart(ctx context.Context, st objstore.Store, snap snapshot, r span) error {
	if snap.base == nil {
		return nil
	}
	f.mu.Lock()
	gaps := f.valid.gaps(r.Off, min(r.End, f.baseLimit, f.size))
	f.mu.Unlock()
	return f.fill(ctx, st, *snap.base, gaps)
}

// multipart uploads snap in parts: parts of a large base object that were
// not written are copied on the server when the backend can; the others
// are uploaded from the staging file (clean bytes filled from the base).
func (f *File) multipart(ctx context.Context, st objstore.Store, mp objstore.Multipart, lay layout, snap snapshot, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	m := f.m
	caps := st.Caps()
	parts, ok := lay.parts(snap.size)
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("writeback: %s: %d bytes exceed the backend's maximum object size: %w", snap.target, snap.size, objstore.ErrUnsupported)
	}
	b := snap.base
	canCopy := b != nil && caps.CopyPart && snap.size >= 2*caps.MinPartSize
	if canCopy { // CopyPart has no version precondition: check the base first
		info, err := st.Stat(ctx, b.Key)
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		if b.Version != "" && info.Version != b.Version {
			return objstore.ObjectInfo{}, fmt.Errorf("writeback: base %s changed (version %s, want %s): %w", b.Key, info.Version, b.Version, objstore.ErrPrecondition)
		}
	}
	rd, err := openData(m.j.dataPath(f.id), os.O_RDONLY)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer rd.Close()
	opts.CopyParts = canCopy
	up, err := f.createUpload(ctx, mp, snap.target.Key, opts)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	err = m.runParts(ctx, parts, func(ctx context.Context, n int, p span) (bool, error) {
		if canCopy && p.End <= snap.baseLimit && !snap.dirty.overlaps(p.Off, p.End) {
			return false, up.CopyPart(ctx, n, b.Key, p.Off, p.End-p.Off)
		}
		if err := f.fillPart(ctx, st, snap, p); err != nil {
			return true, err
		}
		return true, up.UploadPart(ctx, n, io.NewSectionReader(f.guard(rd, snap.size), p.Off, p.End-p.Off), p.End-p.Off)
	}, func(n int, p span) bool {
		return !(canCopy && p.End <= snap.baseLimit && !snap.dirty.overlaps(p.Off, p.End))
	})
	if err != nil {
		f.abortUpload(up, snap.target.Key)
		return objstore.ObjectInfo{}, err
	}
	return f.completeUpload(ctx, st, up, snap.target.Key, snap.size)
}

// runParts runs do for every part with bounded parallelism: each takes a
// slot of the scheduler, heavy parts of the heavy class (before a goroutine
// starts, so goroutines stay bounded). The first error cancels the rest.
func (m *Manager) runParts(ctx context.Context, parts []span, do func(ctx context.Context, n int, p span) (sent bool, err error), heavy func(n int, p span) bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, p := range parts {
		n := i + 1
		class := classLight
		if heavy(n, p) && p.End-p.Off >= smallRequest {
			class = classHeavy
		}
		if err := m.sched.acquire(ctx, class); err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer m.sched.release(class)
			sent, err := do(ctx, n, p)
			if err != nil {
				cancel(err)
				return
			}
			if sent {
				m.uploadedBytes.Add(p.End - p.Off)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && (!errors.Is(err, context.Canceled) || errors.Is(err, errStagedChanged)) {
		return err
	}
	return ctx.Err()
}

// createUpload starts a multipart upload and journals its id so that a
// restarted ferry aborts it.
func (f *File) createUpload(ctx context.Context, mp objstore.Multipart, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	if err := f.m.sched.acquire(ctx, classLight); err != nil {
		return nil, err
	}
	// Like a Put, a CreateUpload sent may take effect unseen: it runs to
	// its answer, so that the upload is journaled and then aborted.
	up, err := mp.CreateUpload(f.m.sendCtx(ctx), key, opts)
	f.m.sched.release(classLight)
	if errors.Is(err, objstore.ErrUnsupported) {
		f.mu.Lock()
		f.noStream = true
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", errNoMultipart, err)
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.uploads = append(f.uploads, uploadRec{Key: key, ID: up.ID(), Token: opts.Metadata[MetaUpload], owned: true})
	f.mu.Unlock()
	if err := f.writeRecord(); err != nil {
		f.m.log.Warn("writeback: journal", "path", key, "err", err)
	}
	return up, nil
}

// completeUpload completes up, an upload of size bytes to key. A retried
// Complete whose first attempt landed fails with ErrNotFound (the upload
// is gone): the object is then accepted if it is a new version (the key
// is stat'ed before the Complete) of the expected size.
func (f *File) completeUpload(ctx context.Context, st objstore.Store, up objstore.Upload, key string, size int64) (objstore.ObjectInfo, error) {
	if err := f.m.sched.acquire(ctx, classLight); err != nil {
		f.abortUpload(up, key)
		return objstore.ObjectInfo{}, err
	}
	before, err := st.Stat(ctx, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		f.m.sched.release(classLight)
		f.abortUpload(up, key)
		return objstore.ObjectInfo{}, err
	}
	info, err := up.Complete(f.m.sendCtx(ctx))
	if errors.Is(err, objstore.ErrNotFound) {
		if got, serr := st.Stat(ctx, key); serr == nil && got.Size == size && got.Version != before.Version {
			f.m.log.Debug("writeback: Complete was retried after it landed; the object is there", "key", key)
			info, err = got, nil
		}
	}
	f.m.sched.release(classLight)
	if err != nil {
		f.abortUpload(up, key)
		return objstore.ObjectInfo{}, err
	}
	f.forgetUpload(up.ID())
	return info, nil
}

// abortUpload aborts up (with a context of its own: the attempt's may be
// cancelled) and forgets it (see settleAbort); when the manager is
// closing it is left in the journal for the next process to abort.
func (f *File) abortUpload(up objstore.Upload, key string) {
	if f.m.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(f.m.ctx, abortTimeout)
	defer cancel()
	err := up.Abort(ctx)
	if err != nil && f.m.ctx.Err() != nil {
		return
	}
	f.settleAbort(up.ID(), key, err)
}

// settleAbort records the outcome err of aborting the multipart upload
// id. An aborted upload is forgotten, and so is one whose abort failed
// for good (a lifecycle rule must remove it). After an error worth
// retrying (an outage) the upload is kept, no longer owned: the file's
// next attempt aborts it, or, since its record keeps it, the next ferry
// on the same directory does.
func (f *File) settleAbort(id, key string, err error) {
	if err == nil || !objstore.Retryable(err) {
		if err != nil {
			f.m.log.Warn("writeback: could not abort a multipart upload; a bucket lifecycle rule must remove it", "key", key, "upload", id, "err", err)
		}
		f.forgetUpload(id)
		return
	}
	f.m.log.Info("writeback: could not abort a multipart upload yet; it is retried later", "key", key, "upload", id, "err", err)
	f.mu.Lock()
	for i := range f.uploads {
		if f.uploads[i].ID == id {
			f.uploads[i].owned = false
		}
	}
	f.mu.Unlock()
}

// staleUploads reports whether multipart uploads are left to abort (see
// settleAbort).
func (f *File) staleUploads() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.uploads {
		if !u.owned {
			return true
		}
	}
	return false
}

func (f *File) forgetUpload(id string) {
	f.mu.Lock()
	kept := f.uploads[:0]
	for _, u := range f.uploads {
		if u.ID != id {
			kept = append(kept, u)
		}
	}
	f.uploads = kept
	f.mu.Unlock()
}

// abortStale aborts multipart uploads left by cancelled attempts, failed
// aborts or an earlier process. An upload whose abort fails is kept for
// a later attempt (see settleAbort); that never holds back the file's
// data (an orphan upload costs storage, never data).
func (f *File) abortStale(ctx context.Context, st objstore.Store, stale []uploadRec) error {
	if len(stale) == 0 {
		return nil
	}
	mp, _ := st.(objstore.Multipart)
	for _, u := range stale {
		if mp == nil {
			f.forgetUpload(u.ID)
			continue
		}
		if err := f.m.sched.acquire(ctx, classLight); err != nil {
			return err
		}
		err := mp.AbortUpload(ctx, u.Key, u.ID)
		f.m.sched.release(classLight)
		if err != nil && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		f.settleAbort(u.ID, u.Key, err)
	}
	return f.writeRecord()
}

// copyObject copies src (at version) to dst with new metadata on the
// server. When src is dst (a metadata change in place), a retried Copy
// whose first attempt landed fails its precondition (the version
// changed); when src is another name, a replayed Copy whose first attempt
// landed and whose source was then deleted fails with not found: in both
// cases the object is accepted if it has the size and metadata wanted.
func (m *Manager) copyObject(ctx context.Context, st objstore.Store, src, dst, version string, size int64, md map[string]string) (objstore.ObjectInfo, error) {
	if err := m.sched.acquire(ctx, classLight); err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer m.sched.release(classLight)
	info, err := st.Copy(m.sendCtx(ctx), src, dst, objstore.CopyOptions{IfVersion: version, Metadata: md})
	// A Copy to another name whose source is gone may have landed before:
	// a ferry killed after its copy and the source's delete leaves a
	// record that a restart replays. The destination with the size and
	// metadata wanted is that copy.
	if (src == dst && errors.Is(err, objstore.ErrPrecondition)) || (src != dst && errors.Is(err, objstore.ErrNotFound)) {
		if got, serr := st.Stat(ctx, dst); serr == nil && got.Size == size && sameMetadata(got.Metadata, md) {
			return got, nil
		}
	}
	return info, err
}

// sameMetadata reports whether the stored metadata got carries every
// entry of want (keys compared in lower case, as stores return them).
func sameMetadata(got, want map[string]string) bool {
	for k, v := range want {
		if got[strings.ToLower(k)] != v {
			return false
		}
	}
	return true
}
