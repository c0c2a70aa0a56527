package writeback

import (
	"errors"
	"os"
)

// maxSpares bounds the empty data files kept for reuse.
const maxSpares = 512

// Creating a file costs far more than truncating and renaming one on many
// file systems (half a millisecond on some cloud disks), so the data file
// of a finished staged file is kept, empty, under a fresh id, and the next
// new staged file takes it. Spares have no journal record: recovery
// deletes them like any orphan data file.

// newData returns the id and open, empty data file for a new staged file:
// a spare when there is one, else a new file.
func (m *Manager) newData() (string, *os.File, error) {
	m.spareMu.Lock()
	for len(m.spares) > 0 {
		id := m.spares[len(m.spares)-1]
		m.spares = m.spares[:len(m.spares)-1]
		m.spareMu.Unlock()
		fd, err := os.OpenFile(m.j.dataPath(id), os.O_RDWR, 0o600)
		if err == nil {
			return id, fd, nil
		}
		m.spareMu.Lock()
	}
	m.spareMu.Unlock()
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
	full := len(m.spares) >= maxSpares || m.sparesClosed
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

// prefill creates spare data files in the background until there are
// Config.SpareFiles, so that the first files a task writes find them.
func (m *Manager) prefill() {
	for m.ctx.Err() == nil {
		m.spareMu.Lock()
		enough := len(m.spares) >= m.cfg.SpareFiles || m.sparesClosed
		m.spareMu.Unlock()
		if enough {
			return
		}
		id := m.newID()
		fd, err := m.j.createData(id)
		if err != nil {
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
