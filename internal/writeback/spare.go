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

// newData returns the id and open, empty data file for a new staged file:
// a spare when there is one, else a new file. Once fewer than a sixteenth
// of Config.SpareFiles are left, more are made in the background (a task
// writing many small files outruns the recycling, as uploads yield to it).
func (m *Manager) newData() (string, *os.File, error) {
	m.spareMu.Lock()
	for len(m.spares) > 0 {
		id := m.spares[len(m.spares)-1]
		m.spares = m.spares[:len(m.spares)-1]
		low := len(m.spares) < sparesLow(m.cfg.SpareFiles)
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
// so that no resurrection recreates the data file meanwhile.
func (m *Manager) forget(id string) error {
	if err := m.j.write(&record{V: recordVersion, ID: id, State: stateGone}); err != nil {
		return err
	}
	path := m.j.dataPath(id)
	m.spareMu.Lock()
	full := len(m.spares) >= max(maxSpares, m.cfg.SpareFiles) || m.sparesClosed
	m.spareMu.Unlock()
	if !full {
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
	start := !m.refilling && !m.sparesClosed && len(m.spares) < m.cfg.SpareFiles
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
		n := len(m.spares)
		enough := n >= m.cfg.SpareFiles || m.sparesClosed || m.ctx.Err() != nil ||
			(busy && n >= sparesBusy(m.cfg.SpareFiles)) ||
			(!busy && n+staged >= m.cfg.SpareFiles)
		if enough {
			m.refilling = false
		}
		m.spareMu.Unlock()
		if enough {
			return
		}
		id := m.newID()
		fd, err := m.j.createData(id)
		if err != nil {
			m.spareMu.Lock()
			m.refilling = false
			m.spareMu.Unlock()
			return
		}
		fd.Close()
		m.spareMu.Lock()
		m.spares = append(m.spares, id)
		m.spareMu.Unlock()
	}
}

// dropSpares deletes the spare data files (at Close).
func (m *Manager) dropSpares() {
	m.spareMu.Lock()
	ids := m.spares
	m.spares, m.sparesClosed = nil, true
	m.spareMu.Unlock()
	for _, id := range ids {
		os.Remove(m.j.dataPath(id))
	}
}
