package writeback

import (
	"fmt"
	"os"
	"syscall"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// recover loads the journal left by an earlier process (see README.md):
// closed files are queued again, records of files that were never closed
// are discarded, leftover multipart uploads and old names are cleaned up.
// It runs in New, before any other method can be called.
func (m *Manager) recover() error {
	recs, bad, err := m.j.scan()
	if err != nil {
		return err
	}
	if bad > 0 {
		m.log.Warn("writeback: skipped unreadable journal lines (cut by a crash)", "lines", bad, "journal", m.j.logPath())
	}
	// The highest sequence number of each target names the live file; an
	// older record of the same target lost a rename or a replace.
	winner := map[Target]*record{}
	for _, r := range recs {
		m.seq.Store(max(m.seq.Load(), r.Seq))
		if r.State != stateClosed && r.State != stateOpen {
			continue
		}
		if w := winner[r.Target]; w == nil || w.Seq < r.Seq {
			winner[r.Target] = r
		}
	}
	var kick []*File
	scanned := map[orphanScanKey]bool{}
	for _, r := range recs {
		if f := m.recoverOne(r, winner[r.Target] == r, scanned); f != nil {
			kick = append(kick, f)
		}
	}
	for _, f := range kick {
		f.kick()
	}
	return nil
}

// recoverOne turns a record into a file to upload, or a stub with cleanup
// left (aborts, deletes), or forgets it; it returns the file when it has
// work to do.
func (m *Manager) recoverOne(r *record, winner bool, scanned map[orphanScanKey]bool) *File {
	f := &File{
		m: m, id: r.ID, target: r.Target, size: r.Size, symlink: r.Symlink,
		attrs: Attrs{
			Mode: r.Mode, HasMode: true, Uid: r.Uid, Gid: r.Gid, HasOwner: r.OwnerSet, Rdev: r.Rdev,
			Mtime: timeFromNs(r.MtimeNs), Atime: timeOrZero(r.AtimeNs), Ctime: timeOrZero(r.CtimeNs),
		},
		since: m.cfg.Now(), kickCh: make(chan struct{}, 1), done: make(chan struct{}),
		uploads: r.Uploads, journaled: r.State, live: true,
		orphans: orphanScansFor(r, scanned),
	}
	path := r.Target.String()
	upload := winner && (r.State == stateClosed || (r.State == stateOpen && r.Reopened))
	// What landed at the file's own name stays there when the file is
	// durable, or was never closed (a Sync may have made it durable).
	f.verifyFrom(r, r.State == stateUploaded || (r.State == stateOpen && !upload))
	switch {
	case upload:
		f.restore(r)
		if r.State == stateOpen {
			m.log.Warn("writeback: file was modified again after it was closed, and not closed again before ferry stopped; uploading it as of its last change", "path", path)
		} else {
			m.log.Info("writeback: recovered a staged file; uploading it", "path", path, "size", r.Size)
		}
		m.setFileLocked(f.target, f)
	case r.State == stateUploaded:
		f.removed = true // durable already: only old names to delete
		m.setDeletesLocked(f, r.DeleteAfter)
		os.Remove(m.j.dataPath(r.ID))
	default:
		switch r.State {
		case stateOpen:
			m.log.Warn("writeback: file was still open when ferry stopped; discarding its partial content", "path", path)
		case stateClosed:
			m.log.Warn("writeback: superseded staged file discarded", "path", path)
		}
		f.removed = true
		if len(f.uploads) == 0 && len(f.verify) == 0 && len(f.orphans) == 0 {
			if err := m.j.remove(r.ID); err != nil {
				m.log.Warn("writeback: remove staging", "path", path, "err", err)
			}
			return nil
		}
		f.journaled = stateDiscarded
		os.Remove(m.j.dataPath(r.ID))
		if err := m.j.write(f.recordLocked()); err != nil {
			m.log.Warn("writeback: journal", "path", path, "err", err)
		}
	}
	m.byID[f.id] = f
	return f
}

// restore makes f the closed, not yet durable file r describes, checking
// that its staged data is there.
func (f *File) restore(r *record) {
	f.hasData = r.Symlink == "" && r.Mode&syscall.S_IFMT == 0
	f.m.setDeletesLocked(f, r.DeleteAfter)
	f.gen, f.closedGen = 1, 1
	if b := r.Base; b != nil {
		f.setBaseLocked(&objstore.ObjectInfo{Key: b.Key, Version: b.Version, Size: b.Size, Metadata: b.Metadata})
		f.baseLimit = min(b.Limit, r.Size)
		f.dirty = rangesFromPairs(r.Dirty)
		f.valid = f.dirty.clone()
	}
	if !f.hasData {
		return
	}
	st, err := os.Stat(f.m.j.dataPath(r.ID))
	switch {
	case err != nil:
		f.corrupt = fmt.Errorf("writeback: staged data of %s is missing: %w", r.Target, err)
	case st.Size() < r.Size:
		f.corrupt = fmt.Errorf("writeback: staged data of %s is shorter (%d bytes) than journaled (%d)", r.Target, st.Size(), r.Size)
	}
}
