package writeback

import (
	"fmt"
	"os"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// recover loads the journal left by an earlier process (see README.md):
// closed files are queued again, records of files that were never closed
// are discarded, leftover multipart uploads and old names are cleaned up.
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
	for _, r := range recs {
		f := m.recoverOne(r, winner[r.Target] == r)
		if f != nil {
			kick = append(kick, f)
		}
	}
	for _, f := range kick {
		f.kick()
	}
	return nil
}

// recoverOne turns a record into a file (or a stub with cleanup left), or
// deletes it; it returns the file when it has work to do.
func (m *Manager) recoverOne(r *record, winner bool) *File {
	f := &File{
		m: m, id: r.ID, target: r.Target, size: r.Size, mode: r.Mode,
		mtime: timeFromNs(r.MtimeNs), mtimeSet: r.MtimeSet, symlink: r.Symlink,
		since: m.cfg.Now(), kickCh: make(chan struct{}, 1), done: make(chan struct{}),
		uploads: r.Uploads, journaled: r.State, live: true,
	}
	path := r.Target.String()
	switch {
	case r.State == stateClosed && winner:
		f.hasData = r.Symlink == ""
		f.deleteAfter = r.DeleteAfter
		f.gen, f.closedGen = 1, 1
		if b := r.Base; b != nil {
			f.base = &objstore.ObjectInfo{Key: b.Key, Version: b.Version, Size: b.Size, Metadata: b.Metadata}
			f.baseLimit = b.Limit
			f.dirty = rangesFromPairs(r.Dirty)
			f.valid = f.dirty.clone()
		}
		if f.hasData {
			st, err := os.Stat(m.j.dataPath(r.ID))
			switch {
			case err != nil:
				f.corrupt = fmt.Errorf("writeback: staged data of %s is missing: %w", path, err)
			case st.Size() < r.Size:
				f.corrupt = fmt.Errorf("writeback: staged data of %s is shorter (%d bytes) than journaled (%d)", path, st.Size(), r.Size)
			}
		}
		m.log.Info("writeback: recovered a staged file; uploading it", "path", path, "size", r.Size)
		m.files[f.target] = f
	case r.State == stateUploaded:
		f.removed = true // durable already: only old names to delete
		f.deleteAfter = r.DeleteAfter
		os.Remove(m.j.dataPath(r.ID))
	default:
		if r.State == stateOpen {
			m.log.Warn("writeback: file was still open when ferry stopped; discarding its partial content", "path", path)
		} else if r.State == stateClosed {
			m.log.Warn("writeback: superseded staged file discarded", "path", path)
		}
		f.removed = true
		if len(f.uploads) == 0 {
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
