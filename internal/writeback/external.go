package writeback

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// External writes (FUSE passthrough for writers). The kernel can write a
// file's staging file itself, as it reads cache files: the task's write(2)
// then costs what a write to the local disk costs, with no copy through
// /dev/fuse and no ferry CPU (four tasks writing 500 MiB each took 3x
// longer through ferry than to disk on 2 cores). Ferry no longer sees the
// writes, so it learns them from the data file:
//
//   - Only a file whose staging file is its whole content (no base: it
//     was created or truncated here) and that is not reopened (closed,
//     modified again before it was durable, when recovery relies on
//     every modification being journaled) is handed out for writing
//     (Backing).
//   - While such handles are open (ext.open > 0), every look at the
//     file's size, attributes or bytes (Size, Attrs, reads, snapshots,
//     the upload guard, Flush, Release) first compares the data file's
//     size and change time with the last ones seen; a change is taken as
//     a modification of the whole file (dirty, a new generation, the
//     data file's mtime). Change times are fine-grained once looked at
//     (Linux 6.13+ multigrain timestamps), so a write after a look always
//     moves them: an upload attempt that read the file across a write
//     fails its guard and the file uploads again.
//   - When the last such handle ends (EndExternal, before its Release),
//     the file is taken as modified once more, unconditionally: nothing
//     can write it after that, so its next upload holds the final bytes
//     whatever the clock's resolution.
//   - While such a writer is open, a poller (pollExternal) looks at the
//     file every extPollEvery, so that a file that nobody looks at still
//     streams: its parts are uploaded once its size has moved past them,
//     each with the sum of what was sent, and the close sends again every
//     part whose bytes changed since (stream_verify.go).
//   - The staging disk's floor (MinFreeBytes) is not enforced on these
//     writes: Backing hands a file out only while the disk has
//     externalHeadroom above the floor; past it the kernel's own ENOSPC
//     reaches the task.

// externalHeadroom: the free space above MinFreeBytes that the staging
// disk must have for a file to be handed out for external writes.
const externalHeadroom = 8 << 30

// The inode flags ioctls and FS_IMMUTABLE_FL (include/uapi/linux/fs.h;
// the flags are an int, the ioctl numbers say long).
const (
	fsIocGetFlags = 0x80086601
	fsIocSetFlags = 0x40086602
	fsImmutableFL = 0x10
)

// setImmutable sets or clears the immutable flag of the open file fd.
func setImmutable(fd uintptr, on bool) error {
	var flags int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, fsIocGetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return e
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, fsIocSetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return e
	}
	return nil
}

// extState is a File's external-write state (guarded by File.mu).
type extState struct {
	// handed: the kernel was given the data file (Backing). It may hold
	// it past the handles' releases (an aborted session releases them
	// itself), so the data file is never recycled as a spare.
	handed bool
	// frozen: the data file is immutable (FreezeExternal).
	frozen bool
	// writable: the kernel was given the data file for writing once:
	// streamed parts are checked at the close (stream_verify.go).
	writable bool
	open     int   // handles the kernel may write through
	size     int64 // the data file's size at the last look (-1: none yet)
	ctime    int64 // and its change time (ns)
}

// Backing returns a descriptor of f's staging file for the kernel to read
// (write false) or read and write (true) itself, with the key that names
// its bytes, when f's staging file holds its whole content (see above).
// A writable one counts as an external writer until EndExternal. The
// caller closes the returned file.
func (f *File) Backing(write bool) (*os.File, string, bool) {
	if !f.m.cfg.ExternalWrites {
		return nil, "", false
	}
	if write && !f.m.space.headroom(externalHeadroom) {
		return nil, "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := f.hasData && f.symlink == "" && f.attrs.Mode&syscall.S_IFMT == 0 && f.live && !f.removed && !f.dropped &&
		f.base == nil && f.corrupt == nil && f.stageErr == nil
	if write {
		ok = ok && (f.closedGen == 0 || f.closedGen <= f.durableGen)
	}
	if !ok {
		return nil, "", false
	}
	fd, err := f.openDataLocked()
	if err != nil {
		return nil, "", false
	}
	nfd, err := syscall.Dup(int(fd.Fd()))
	if err != nil {
		return nil, "", false
	}
	syscall.CloseOnExec(nfd)
	f.ext.handed = true
	if write {
		if f.ext.open == 0 {
			f.ext.size = -1
			f.m.watchExternal(f)
		}
		f.ext.open++
		f.ext.writable = true
	}
	return os.NewFile(uintptr(nfd), fd.Name()), "wb:" + f.id, true
}

// External reports whether the kernel may write f's data file for an
// open handle (Backing(true) counted, EndExternal not yet): ferry learns
// those writes only when it looks, so what it shows of f must not be
// cached.
func (f *File) External() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ext.open > 0
}

// EndExternal ends one external writer that Backing(true) counted; the
// last one marks the file modified (see above). Call it before the
// handle's Release.
func (f *File) EndExternal() {
	f.mu.Lock()
	if f.ext.open > 0 {
		f.absorbLocked()
		f.ext.open--
		if f.ext.open == 0 {
			f.finalAbsorbLocked()
			f.m.unwatchExternal(f)
		}
	}
	f.mu.Unlock()
}

// finalAbsorbLocked takes the file as modified once more after its last
// external writer (see above), whatever the data file's stamp shows.
// Its times are the last look's: a utimes or chmod made after the last
// write (and after a look at the file) is not undone (the release can
// come well after the close: fusefs holds it while a mapping lives).
// Caller holds f.mu.
func (f *File) finalAbsorbLocked() {
	if f.fd == nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.fd.Fd()), &st); err != nil {
		return
	}
	moved := st.Size != f.ext.size || st.Ctim.Nano() != f.ext.ctime
	f.ext.size, f.ext.ctime = 0, 0 // the last look: none after it
	f.takeWholeLocked(&st, moved)
}

// absorbLocked takes what external writers changed in the data file into
// f (see above). Caller holds f.mu.
func (f *File) absorbLocked() {
	if f.ext.open == 0 && f.ext.size >= 0 || f.fd == nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.fd.Fd()), &st); err != nil {
		return
	}
	ct := st.Ctim.Nano()
	if st.Size == f.ext.size && ct == f.ext.ctime {
		return
	}
	f.ext.size, f.ext.ctime = st.Size, ct
	if f.ext.open == 0 {
		f.ext.size = 0 // the last look: none after it
		f.ext.ctime = 0
	}
	f.takeWholeLocked(&st, true)
}

// takeWholeLocked takes the data file (stat st) as f's whole, modified
// content: a new generation, all of it dirty. With times, f's mtime is the
// data file's; without, f keeps its times. Caller holds f.mu.
func (f *File) takeWholeLocked(st *syscall.Stat_t, times bool) {
	f.size = st.Size
	f.dirty = rangeSet(nil).add(0, st.Size)
	f.valid = f.dirty.clone()
	if f.attemptsStarted != f.attemptsEnded {
		f.written = f.written.add(0, max(st.Size, 1))
	}
	ctime := f.attrs.Ctime
	f.touchLocked()
	if times {
		f.attrs.Mtime = time.Unix(0, st.Mtim.Nano())
	} else {
		f.attrs.Ctime = ctime
	}
}

// extPollEvery is how often pollExternal looks at the files that the
// kernel writes.
const extPollEvery = 250 * time.Millisecond

// watchExternal adds f to the files pollExternal looks at, starting the
// poller when it is not running. Called with f.mu held (m.extMu is a
// leaf under it).
func (m *Manager) watchExternal(f *File) {
	m.extMu.Lock()
	defer m.extMu.Unlock()
	if m.extFiles == nil {
		m.extFiles = map[*File]struct{}{}
	}
	m.extFiles[f] = struct{}{}
	if !m.extPolling {
		m.extPolling = m.goFn(m.pollExternal)
	}
}

// unwatchExternal removes f from the poller's files.
func (m *Manager) unwatchExternal(f *File) {
	m.extMu.Lock()
	delete(m.extFiles, f)
	m.extMu.Unlock()
}

// pollExternal looks at every file with an external writer each
// extPollEvery: what the kernel wrote is taken in, and a file large
// enough streams (see above). It ends when no file is left (the next
// watchExternal starts it again) or the manager closes.
func (m *Manager) pollExternal() {
	t := time.NewTicker(extPollEvery)
	defer t.Stop()
	var files []*File
	for {
		select {
		case <-m.ctx.Done():
			m.extMu.Lock()
			m.extPolling = false
			m.extMu.Unlock()
			return
		case <-t.C:
		}
		m.extMu.Lock()
		if len(m.extFiles) == 0 {
			m.extPolling = false
			m.extMu.Unlock()
			return
		}
		files = files[:0]
		for f := range m.extFiles {
			files = append(files, f)
		}
		m.extMu.Unlock()
		for _, f := range files {
			f.pollExternal()
		}
	}
}

// pollExternal takes in what the kernel wrote into f and wakes or starts
// f's stream when it changed. A change counts as a burst of the task's
// writes: uploads yield to it as to writes through ferry.
func (f *File) pollExternal() {
	f.mu.Lock()
	gen := f.gen
	if f.ext.open > 0 {
		f.absorbLocked()
	}
	changed := f.gen != gen
	if changed {
		f.streamLocked()
	}
	f.mu.Unlock()
	if changed {
		f.m.sched.busy()
	}
}

// FreezeExternal makes f's data file immutable when the kernel may still
// write it for a handle that ferry released in the kernel's place (the
// FUSE session was aborted: nothing tells ferry of later writes), so that
// those writes fail (EPERM) instead of landing unseen; what was written
// until now is taken in and uploaded. The data file is removed at Close.
func (f *File) FreezeExternal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ext.open == 0 || f.fd == nil || f.ext.frozen {
		return
	}
	f.absorbLocked()
	if err := setImmutable(f.fd.Fd(), true); err != nil {
		f.m.log.Warn("writeback: cannot stop the writes of a file open when the mount ended; later ones are not uploaded", "path", f.target.String(), "err", err)
		return
	}
	f.ext.frozen = true
}

// keepFrozen forgets id in the journal but leaves its (immutable) data
// file for Close to remove.
func (m *Manager) keepFrozen(id string) {
	if err := m.j.write(&record{V: recordVersion, ID: id, State: stateGone}); err != nil {
		m.log.Warn("writeback: journal", "id", id, "err", err)
	}
	m.frozenMu.Lock()
	m.frozen = append(m.frozen, m.j.dataPath(id))
	m.frozenMu.Unlock()
}

// thawFrozen clears the immutable flag of the frozen data files and
// removes them.
func (m *Manager) thawFrozen() {
	m.frozenMu.Lock()
	paths := m.frozen
	m.frozen = nil
	m.frozenMu.Unlock()
	for _, p := range paths {
		if fd, err := os.Open(p); err == nil {
			_ = setImmutable(fd.Fd(), false)
			fd.Close()
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			m.log.Warn("writeback: remove staging", "path", p, "err", err)
		}
	}
}
