package writeback

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// errRelease is returned by Release without a matching Acquire.
var errRelease = errors.New("writeback: Release without Acquire")

// File is one dirty (or open) file: staged bytes on local disk plus,
// optionally, a base object whose bytes fill the ranges never written.
// All methods are safe for concurrent use.
//
// Lock order: jmu, then Manager.mu, then mu.
type File struct {
	m  *Manager // immutable
	id string   // immutable: names <id>.data and the journal record

	// jmu serializes this file's journal writes so that an older snapshot
	// never replaces a newer one, and a dropped file's record is never
	// written again.
	jmu sync.Mutex

	// mu guards every field below.
	mu      sync.Mutex
	target  Target
	refs    int      // open handles (Acquire − Release)
	fd      *os.File // staging data, opened lazily; nil for symlinks and stubs
	hasData bool     // has a data file (false for symlinks and stubs)
	size    int64
	// attrs: mode (with the type bits of a special file), owner, times;
	// uploaded as metadata (attrs.go). Mtime and Ctime are always set.
	attrs   Attrs
	symlink string
	// base is the object the clean ranges come from; bytes at or past
	// baseLimit are not the base's (they were truncated away).
	base      *objstore.ObjectInfo
	baseLimit int64
	// dirty ⊇ the bytes written since the base (and since the snapshot of
	// any attempt in flight): only in the data file. Only commit of an
	// attempt that saw every change clears it.
	dirty rangeSet
	valid rangeSet // ⊇ dirty: the data file holds the true bytes here
	// Generations: gen counts modifications; the others record the gen
	// that was closed (journaled as closed), made durable, asked to sync,
	// and the gen of the last metadata change.
	gen, closedGen, durableGen, syncGen, metaGen uint64
	truncMin                                     int64 // smallest truncation since the running attempt's snapshot
	// written: the bytes written since the running attempt's snapshot
	// (nil while none runs; see guardedReader).
	written   rangeSet
	version   string // version of the last upload
	journaled string // state of the record on disk; "" when none
	since     time.Time
	live      bool // registered in Manager.byID
	removed   bool // unlinked (or replaced); uploads nothing more
	dropped   bool // durable and released: staging deleted, base is the object
	uploads   []uploadRec
	// landing: the tokens the running attempt's object may carry
	// (journaled); verify: the tokens of uploads of an earlier process to
	// check before the first attempt (see checkLandings); tokens counts
	// the tokens made.
	landing, verify []landingRec
	tokens          uint64
	// landed: the running attempt's object landed as the file's own at
	// its key (commit), so nothing of this attempt can be a stray there
	// (see strayLocked), even if the file is removed before the attempt
	// ends.
	landed bool
	// orphans: keys where a dead process may have left multipart uploads
	// it never journaled (recovery; see orphanScan).
	orphans []orphanScan
	// deleteAfter: keys to delete once this file is durable (renamed
	// from). Changed only by Manager.setDeletesLocked (with m.mu held too),
	// which keeps Manager.delKeys in step.
	deleteAfter []deleteRec
	stream      *stream
	noStream    bool // the store cannot stream (no Multipart)
	uploading   bool // the upload loop goroutine is running
	kickCh      chan struct{}
	cancel      context.CancelCauseFunc // cancels the running attempt
	// attemptsStarted and attemptsEnded number the attempts (one at a
	// time): the running one is attemptsStarted when they differ.
	attemptsStarted, attemptsEnded uint64
	// baseReadsDone is the number of the attempt that no longer reads its
	// base (its staging file is complete and its last request, a Put from
	// it, is about to be sent): materialize need not wait for it to end.
	baseReadsDone uint64
	lastErr       error
	failedGen     uint64 // gen covered by the last failed attempt
	// final: lastErr is final, so the loop stops unless kicked since the
	// failed attempt began (kicks counts kicks; finalKicks is the count
	// when that attempt began).
	final             bool
	kicks, finalKicks uint64
	done              chan struct{} // closed and replaced after every attempt
	stageErr          error         // a staging write failed; reported by Flush/Release
	corrupt           error         // recovery found the staging data unusable
	// ext: the kernel writes the data file itself (see external.go).
	ext extState
}

func (m *Manager) newFile(t Target, id string) *File {
	now := m.cfg.Now()
	return &File{
		m:      m,
		id:     id,
		target: t,
		attrs:  Attrs{Mtime: now, Ctime: now},
		since:  now,
		kickCh: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

// Acquire counts an open handle. Every Acquire needs one Release.
func (f *File) Acquire() {
	f.m.sched.foreground()
	f.jmu.Lock()
	f.m.mu.Lock()
	f.mu.Lock()
	f.refs++
	if f.dropped {
		f.resurrectLocked()
	}
	if f.fd == nil && f.hasData {
		_, _ = f.openDataLocked() // an error is kept in stageErr
	}
	f.mu.Unlock()
	f.m.mu.Unlock()
	f.jmu.Unlock()
}

// Release ends a handle. The last Release of a modified file journals it as
// closed (its bytes are staged) and queues its upload; it returns any
// staging error seen since the previous Flush or Release.
func (f *File) Release() error {
	f.m.sched.foreground()
	f.mu.Lock()
	if f.refs <= 0 {
		f.mu.Unlock()
		return errRelease
	}
	f.absorbLocked()
	f.refs--
	err := f.stageErr
	f.stageErr = nil
	if f.refs > 0 {
		f.mu.Unlock()
		return err
	}
	active := f.live && !f.removed
	unclosed := active && f.gen > f.closedGen
	pending := active && f.gen > f.durableGen
	if f.removed && f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
	f.mu.Unlock()
	switch {
	case unclosed:
		if jerr := f.commitClose(); err == nil {
			err = jerr
		}
	case pending:
		f.kick()
	case active:
		if !f.tryFinish() {
			f.kick()
		}
	}
	return err
}

// Flush journals the file as closed (the application closed a descriptor)
// without ending the handle, so that a kill before the kernel's release
// still finds it; it returns any staging error.
func (f *File) Flush() error {
	f.m.sched.foreground()
	f.mu.Lock()
	f.absorbLocked()
	need := f.live && !f.removed && f.gen > f.durableGen && f.gen > f.closedGen
	err := f.stageErr
	f.mu.Unlock()
	if need {
		if jerr := f.closeRecordOnly(); err == nil {
			err = jerr
		}
	}
	return err
}

// commitClose journals the file as closed and queues its upload.
func (f *File) commitClose() error {
	err := f.closeRecordOnly()
	f.kick()
	return err
}

func (f *File) closeRecordOnly() error {
	f.jmu.Lock()
	defer f.jmu.Unlock()
	f.mu.Lock()
	if !f.live || f.removed {
		f.mu.Unlock()
		return nil
	}
	f.closedGen = f.gen
	fd := f.fd
	f.mu.Unlock()
	if f.m.cfg.SyncJournal && fd != nil {
		if err := fd.Sync(); err != nil {
			return err
		}
	}
	return f.writeRecordLocked()
}

// writeRecord writes the file's current state to the journal.
func (f *File) writeRecord() error {
	f.jmu.Lock()
	defer f.jmu.Unlock()
	return f.writeRecordLocked()
}

// writeRecordLocked is writeRecord with jmu held.
func (f *File) writeRecordLocked() error {
	f.mu.Lock()
	if !f.live {
		f.mu.Unlock()
		return nil
	}
	r := f.recordLocked()
	f.mu.Unlock()
	if err := f.m.j.write(r); err != nil {
		return err
	}
	f.mu.Lock()
	f.journaled = r.State
	f.mu.Unlock()
	return nil
}

// recordLocked builds the journal record of the current state.
func (f *File) recordLocked() *record {
	r := &record{
		V:           recordVersion,
		ID:          f.id,
		Seq:         f.m.seq.Add(1),
		Target:      f.target,
		Size:        f.size,
		Mode:        f.attrs.Mode,
		MtimeNs:     f.attrs.Mtime.UnixNano(),
		Uid:         f.attrs.Uid,
		Gid:         f.attrs.Gid,
		OwnerSet:    f.attrs.HasOwner,
		Rdev:        f.attrs.Rdev,
		AtimeNs:     nsOf(f.attrs.Atime),
		CtimeNs:     nsOf(f.attrs.Ctime),
		Symlink:     f.symlink,
		Uploads:     append([]uploadRec(nil), f.uploads...),
		Landing:     append(append([]landingRec(nil), f.landing...), f.verify...),
		DeleteAfter: append([]deleteRec(nil), f.deleteAfter...),
	}
	switch {
	case f.removed && len(f.deleteAfter) > 0, !f.removed && f.gen == f.durableGen:
		r.State = stateUploaded
	case f.removed:
		r.State = stateDiscarded
	case f.closedGen == f.gen:
		r.State = stateClosed
	default:
		r.State = stateOpen
		r.Reopened = f.closedGen > f.durableGen
	}
	if f.base != nil {
		r.Base = &baseRec{Key: f.base.Key, Version: f.base.Version, Size: f.base.Size, Limit: f.baseLimit, Metadata: f.base.Metadata}
		r.Dirty = f.dirty.pairs()
	}
	return r
}

// openDataLocked opens the staging data file.
func (f *File) openDataLocked() (*os.File, error) {
	if f.fd != nil {
		return f.fd, nil
	}
	fd, err := openData(f.m.j.dataPath(f.id), os.O_RDWR)
	if err != nil {
		if f.stageErr == nil {
			f.stageErr = err
		}
		return nil, err
	}
	f.fd = fd
	return fd, nil
}

// resurrectLocked brings back a dropped file (durable, staging deleted)
// that a stale pointer modifies or opens again: its base is the object, its
// staging an empty sparse file. Caller holds jmu, Manager.mu and mu.
func (f *File) resurrectLocked() {
	f.dropped = false
	delete(f.m.recent, f.target)
	if !f.hasData { // a symlink: nothing staged
		if _, taken := f.m.files[f.target]; taken {
			f.removed = true
			return
		}
		f.live, f.journaled = true, ""
		f.indexLiveLocked()
		f.m.byID[f.id] = f
		f.m.setFileLocked(f.target, f)
		return
	}
	os.Remove(f.m.j.dataPath(f.id))
	fd, err := f.m.j.createData(f.id)
	if err == nil {
		err = fd.Truncate(f.size)
	}
	if err != nil {
		f.stageErr = err
	}
	f.fd = fd
	f.valid, f.dirty = nil, nil
	f.journaled = ""
	if _, taken := f.m.files[f.target]; taken {
		// The name was reused meanwhile: this is an unlinked file now.
		f.removed = true
		os.Remove(f.m.j.dataPath(f.id))
		return
	}
	f.live = true
	f.indexLiveLocked()
	f.m.byID[f.id] = f
	f.m.setFileLocked(f.target, f)
}

// ensureLive resurrects a dropped file before a modification (a caller
// that got f just before it was dropped, as durable, would otherwise
// change a file that uploads nothing more).
func (f *File) ensureLive() {
	f.mu.Lock()
	dropped := f.dropped // symlinks and special files too: chmod, chown, utimens
	f.mu.Unlock()
	if !dropped {
		return
	}
	f.jmu.Lock()
	f.m.mu.Lock()
	f.mu.Lock()
	if f.dropped {
		f.resurrectLocked()
	}
	f.mu.Unlock()
	f.m.mu.Unlock()
	f.jmu.Unlock()
}

// testHookAfterEnsureLive, when set (tests only), runs in lockLive
// between ensureLive and the lock.
var testHookAfterEnsureLive func(*File)

// lockLive locks mu on a live (not dropped) file, resurrecting it first
// when it was dropped. A modification must change the file under this
// one hold of mu: a drop (tryFinish, under mu) may come between an
// ensureLive and a later Lock, and the change would then go to a file
// that uploads nothing more (a chown lost that way under load).
func (f *File) lockLive() {
	for {
		f.ensureLive()
		if h := testHookAfterEnsureLive; h != nil {
			h(f)
		}
		f.mu.Lock()
		if !f.dropped {
			return
		}
		f.mu.Unlock()
	}
}

// HasBase reports whether the file still depends on the object at key in
// its bucket: its clean bytes are read from it (it is the file's base), or
// a rename queued that key for deletion once the file is durable. Either
// way writeback deletes that key itself after the file is durable under
// its current name, so the caller must not delete it earlier.
func (f *File) HasBase(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base != nil && f.base.Key == key && !f.removed {
		return true
	}
	for _, d := range f.deleteAfter {
		if d.Key == key {
			return true
		}
	}
	return false
}
