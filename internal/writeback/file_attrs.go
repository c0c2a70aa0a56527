package writeback

import (
	"maps"
	"syscall"
	"time"
)

// The attributes of a File (mode, owner, times, symlink target) and the
// object metadata they become.

// setAttrsLocked sets the attributes of a new file: zero times are
// the file's creation time. Caller holds mu (or owns f alone).
func (f *File) setAttrsLocked(a Attrs) {
	now := f.attrs.Mtime
	if a.Mtime.IsZero() {
		a.Mtime = now
	}
	if a.Ctime.IsZero() {
		a.Ctime = now
	}
	a.HasMode = true
	f.attrs = a
}

// Target returns the file's current name.
func (f *File) Target() Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.target
}

// Size returns the file's logical size.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absorbLocked()
	return f.size
}

// ModTime returns the last modification time (or the time set).
func (f *File) ModTime() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absorbLocked()
	return f.attrs.Mtime
}

// Mode returns the permission bits, with the type bits of a special file.
func (f *File) Mode() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attrs.Mode
}

// Attrs returns the file's attributes.
func (f *File) Attrs() Attrs {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absorbLocked()
	return f.attrs
}

// Symlink returns the link target, or "" for a regular file.
func (f *File) Symlink() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.symlink
}

// Durable reports whether every modification is in the bucket.
func (f *File) Durable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen == f.durableGen
}

// Version returns the object version of the last upload ("" before one).
func (f *File) Version() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version
}

// SetMode changes the permission bits (a special file keeps its type),
// stored as metadata on upload.
func (f *File) SetMode(mode uint32) {
	f.UpdateAttrs(func(a *Attrs) { a.Mode = a.Mode&syscall.S_IFMT | mode&0o7777 })
}

// SetModTime changes the modification time, stored as metadata on upload.
func (f *File) SetModTime(t time.Time) {
	f.UpdateAttrs(func(a *Attrs) { a.Mtime = t })
}

// UpdateAttrs changes the attributes with fn, as one modification (the
// change time is set to now after fn); they are stored as metadata on
// upload. fn must keep the type bits of the mode.
func (f *File) UpdateAttrs(fn func(a *Attrs)) {
	f.modifyMeta(func() {
		typ := f.attrs.Mode & syscall.S_IFMT
		fn(&f.attrs)
		f.attrs.Mode = typ | f.attrs.Mode&0o7777
		f.attrs.HasMode = true
	})
}

func (f *File) modifyMeta(set func()) {
	f.m.sched.foreground()
	f.lockLive()
	set()
	f.touchLocked()
	f.metaGen = f.gen
	f.mu.Unlock()
	f.afterModify()
}

// touchLocked records a modification (the change time is now).
func (f *File) touchLocked() {
	now := f.m.cfg.Now()
	if f.gen == f.durableGen {
		f.since = now
	}
	f.attrs.Ctime = now
	f.gen++
}

// afterModify journals the first modification of a closed file as open,
// and closes at once a file modified without any handle (setattr on a path).
// A reopened file (closed, not yet durable, modified again) journals every
// modification: recovery then uploads its content as of the last one.
func (f *File) afterModify() {
	f.mu.Lock()
	refs, live, need := f.refs, f.live && !f.removed, f.journalEachLocked()
	f.mu.Unlock()
	switch {
	case !live:
	case refs == 0:
		_ = f.commitClose() // the upload runs anyway; no handle to report to
	case need:
		if err := f.writeRecord(); err != nil {
			f.m.log.Warn("writeback: journal", "path", f.Target().String(), "err", err)
		}
	}
}

// journalEachLocked reports whether the next modification must be
// journaled: the record is not "open" yet, or the file is reopened.
func (f *File) journalEachLocked() bool {
	return f.journaled != stateOpen || f.closedGen > f.durableGen
}

// metadata returns the user metadata to upload (caller holds mu).
func (f *File) metadataLocked() map[string]string {
	md := map[string]string{}
	if f.base != nil {
		maps.Copy(md, f.base.Metadata)
	}
	delete(md, MetaSymlink)
	delete(md, MetaSymlinkBody)
	switch {
	case f.symlink == "":
	case SymlinkInMetadata(f.symlink):
		md[MetaSymlink] = f.symlink
	default:
		md[MetaSymlinkBody] = "1"
	}
	f.attrs.Encode(md)
	return md
}
