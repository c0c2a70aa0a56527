package writeback

import (
	"errors"
	"os"
)

// nicePrefill: prefill runs at the lowest CPU priority (tests turn it off:
// on a loaded machine, their waits for spares would take minutes).
var nicePrefill = true

// maxSpares bounds the empty data files kept for reuse (at least
// Config.SpareFiles are kept).
const maxSpares = 512

// Creating a file costs far more than truncating and renaming one on many
// file systems (half a millisecond on some cloud disks), so the data file
// of a finished staged file is kept, empty, under a fresh id, and the next
// new staged file takes it. Spares have no journal record: recovery
// deletes them like any orphan data file.

// openSpares bounds the spares held open: Create takes one without an
// open(2), which cost 30-40 us there (the call blocks, and the Go runtime
// may hand the handler's thread away meanwhile) of the 60 us a Create took
// in a cp of 1,000 small files. prefill opens more in the background.
const openSpares = 64

// openSpare is a spare data file held open.
type openSpare struct {
	id string
	fd *os.File
}

// readyWant is how many spares prefill keeps open.
func (m *Manager) readyWant() int { return min(openSpares, m.cfg.SpareFiles) }

// spareCountLocked counts the spares, open or not. Caller holds spareMu.
func (m *Manager) spareCountLocked() int { return len(m.spares) + len(m.ready) }

// sparesLowLocked reports whether prefill should run: few spares left, or
// few held open while others are not. Caller holds spareMu.
func (m *Manager) sparesLowLocked() bool {
	return m.spareCountLocked() < sparesLow(m.cfg.SpareFiles) ||
		(len(m.ready) < m.readyWant()/2 && len(m.spares) > 0)
}

// newData returns the id and open, empty data file for a new staged file:
// a spare when there is one (an open one first), else a new file. Once
// fewer than a sixteenth of Config.SpareFiles are left, or fewer than half
// of the open ones, prefill makes (or opens) more in the background (a
// task writing many small files outruns the recycling, as uploads yield
// to it).
func (m *Manager) newData() (string, *os.File, error) {
	m.spareMu.Lock()
	if n := len(m.ready); n > 0 {
		s := m.ready[n-1]
		m.ready = m.ready[:n-1]
		low := m.sparesLowLocked()
		m.spareMu.Unlock()
		if low {
			m.refill()
		}
		return s.id, s.fd, nil
	}
	for len(m.spares) > 0 {
		id := m.spares[len(m.spares)-1]
		m.spares = m.spares[:len(m.spares)-1]
		low := m.sparesLowLocked()
		m.spareMu.Unlock()
		if low {
			m.refill()
		}
		fd, err := openData(m.j.dataPath(id), os.O_RDWR)
		if err == nil {
			return id, fd, nil
		}
		m.spareMu.Lock()
	}
	m.spareMu.Unlock()
	if m.cfg.SpareFiles > 0 {
		m.refill()
	}
	id := m.newID()
	fd, err := m.j.createData(id)
	return id, fd, err
}

// forget drops id from the journal and recycles its data file as a spare
// (or deletes it when there are enough). The caller holds the file's jmu,
// so that no resurrection recreates the data file meanwhile. With
// recycle false the data file is only unlinked: a removed file that
// handles still hold keeps reading its bytes through its descriptor, and
// a spare (truncated, then reused) would take them away.
func (m *Manager) forget(id string, recycle bool) error {
	if err := m.j.write(&record{V: recordVersion, ID: id, State: stateGone}); err != nil {
		return err
	}
	path := m.j.dataPath(id)
	m.spareMu.Lock()
	full := m.spareCountLocked() >= max(maxSpares, m.cfg.SpareFiles) || m.sparesClosed
	m.spareMu.Unlock()
	if !full && recycle {
		spare := m.newID()
		if os.Truncate(path, 0) == nil && os.Rename(path, m.j.dataPath(spare)) == nil {
			m.j.dirChanged()
			m.spareMu.Lock()
			m.spares = append(m.spares, spare)
			m.spareMu.Unlock()
			return nil
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// refill starts prefill unless it runs.
func (m *Manager) refill() {
	m.spareMu.Lock()
	start := !m.refilling && !m.sparesClosed &&
		(m.spareCountLocked() < m.cfg.SpareFiles || (len(m.ready) < m.readyWant() && len(m.spares) > 0))
	m.refilling = m.refilling || start
	m.spareMu.Unlock()
	if start && !m.goFn(m.prefill) {
		m.spareMu.Lock()
		m.refilling = false
		m.spareMu.Unlock()
	}
}

// sparesLow: below this many spares, newData starts prefill (a sixteenth
// of Config.SpareFiles, at least 1); sparesBusy: while the task is busy,
// prefill stops at this many (an eighth).
func sparesLow(n int) int  { return max(1, n/16) }
func sparesBusy(n int) int { return max(2, n/8) }

// prefill creates spare data files in the background, so that the files
// a task writes find them. Creating a file takes CPU too (0.5 ms on some
// disks; several times that on ext4 without a journal right after many
// deletes, which then scans the recently freed inodes): it runs at the
// lowest CPU priority, so that it takes only what the task leaves.
//
// While the task is quiet, prefill fills up to Config.SpareFiles, counting
// the staged files (each is recycled once uploaded). While it is busy,
// uploads yield and recycle few, so prefill keeps a cushion only
// (sparesBusy): enough that a long burst of new files does not create its
// data files inline, while a short one (a cp of 1,000 files, against
// 1,024 spares) does not make hundreds of files it will never use, whose
// creation and deletion took a fifth of ferry's CPU during such a cp.
func (m *Manager) prefill() {
	if nicePrefill {
		lowPriority()
	}
	for {
		busy := !m.sched.busyUntil().IsZero()
		staged := 0
		if !busy {
			m.mu.Lock()
			staged = len(m.byID)
			m.mu.Unlock()
		}
		m.spareMu.Lock()
		n := m.spareCountLocked()
		create := n < m.cfg.SpareFiles &&
			!(busy && n >= sparesBusy(m.cfg.SpareFiles)) &&
			!(!busy && n+staged >= m.cfg.SpareFiles)
		open := len(m.ready) < m.readyWant() && len(m.spares) > 0
		stop := m.sparesClosed || m.ctx.Err() != nil || (!create && !open)
		var id string
		switch {
		case stop:
			m.refilling = false
		case !create: // open the newest closed spare
			id = m.spares[len(m.spares)-1]
			m.spares = m.spares[:len(m.spares)-1]
		}
		m.spareMu.Unlock()
		if stop {
			return
		}
		var (
			fd  *os.File
			err error
		)
		if create {
			id = m.newID()
			fd, err = m.j.createData(id)
		} else {
			fd, err = openData(m.j.dataPath(id), os.O_RDWR)
		}
		if err != nil {
			m.spareMu.Lock()
			m.refilling = false
			m.spareMu.Unlock()
			if !create {
				os.Remove(m.j.dataPath(id))
			}
			return
		}
		m.addSpare(id, fd)
	}
}

// addSpare keeps the empty data file id as a spare: held open (fd) while
// fewer than readyWant are, else closed. After dropSpares it deletes it.
func (m *Manager) addSpare(id string, fd *os.File) {
	m.spareMu.Lock()
	if !m.sparesClosed && len(m.ready) < m.readyWant() {
		m.ready = append(m.ready, openSpare{id: id, fd: fd})
		m.spareMu.Unlock()
		return
	}
	dropped := m.sparesClosed
	if !dropped {
		m.spares = append(m.spares, id)
	}
	m.spareMu.Unlock()
	fd.Close()
	if dropped {
		os.Remove(m.j.dataPath(id))
	}
}

// dropSpares deletes the spare data files (at Close).
func (m *Manager) dropSpares() {
	m.spareMu.Lock()
	ids, ready := m.spares, m.ready
	m.spares, m.ready, m.sparesClosed = nil, nil, true
	m.spareMu.Unlock()
	for _, s := range ready {
		s.fd.Close()
		ids = append(ids, s.id)
	}
	for _, id := range ids {
		os.Remove(m.j.dataPath(id))
	}
}
