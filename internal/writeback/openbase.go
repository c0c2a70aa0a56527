package writeback

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// OpenBase returns the dirty file at t if there is one; otherwise it makes
// the existing object base a file whose clean content is read (never
// eagerly downloaded) from base.Key at base.Version, and whose changes are
// staged. If writeback is deleting or just deleted that object version
// (the old name of a renamed file, or an upload that landed under a name
// its file left), it waits for the delete and stats the object again:
// syscall.ENOENT when it is gone. It returns syscall.EROFS after Stop.
func (m *Manager) OpenBase(ctx context.Context, t Target, base objstore.ObjectInfo) (*File, error) {
	if t.Key == "" {
		return nil, syscall.EINVAL
	}
	if base.Key == "" {
		base.Key = t.Key
	}
	m.sched.foreground()
	bt := Target{Scheme: t.Scheme, Bucket: t.Bucket, Key: base.Key}
	for {
		if f := m.Get(t); f != nil {
			return f, nil
		}
		waited, err := m.waitNoDelete(ctx, bt)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		deleted := base.Version != "" && m.gone[bt] == base.Version
		m.mu.Unlock()
		if waited || deleted {
			if base, err = m.stat(ctx, bt); err != nil {
				return nil, err
			}
		}
		f, err := m.openBase(t, bt, base)
		if !errors.Is(err, errDeleting) {
			return f, err
		}
	}
}

// errDeleting: a delete of the base started while OpenBase prepared.
var errDeleting = errors.New("writeback: base is being deleted")

// waitNoDelete waits until no delete of t is in flight, nor an upload to
// t of a file that left that name (what it may land is deleted); waited
// reports whether there was one.
func (m *Manager) waitNoDelete(ctx context.Context, t Target) (waited bool, err error) {
	for {
		ch := m.changedCh()
		m.mu.Lock()
		busy := m.deleting[t] > 0 || m.strayLocked(t)
		m.mu.Unlock()
		if !busy {
			return waited, nil
		}
		waited = true
		select {
		case <-ch:
		case <-ctx.Done():
			return waited, context.Cause(ctx)
		}
	}
}

// stat returns the object at t; syscall.ENOENT when there is none.
func (m *Manager) stat(ctx context.Context, t Target) (objstore.ObjectInfo, error) {
	st, err := m.resolve(ctx, t.Scheme, t.Bucket)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, err := st.Stat(ctx, t.Key)
	if errors.Is(err, objstore.ErrNotFound) {
		return info, syscall.ENOENT
	}
	return info, err
}

// openBase makes and registers the file of OpenBase, unless a delete of
// its base (at bt) is in flight (errDeleting) or a file appeared at t.
func (m *Manager) openBase(t, bt Target, b objstore.ObjectInfo) (*File, error) {
	id, fd, err := m.newData()
	if err == nil {
		err = fd.Truncate(b.Size) // sparse: costs no disk
	}
	if err != nil {
		if fd != nil {
			fd.Close()
			os.Remove(m.j.dataPath(id))
		}
		return nil, fmt.Errorf("writeback: stage %s: %w", t, err)
	}
	f := m.newFile(t, id)
	f.fd = fd
	f.baseLimit, f.size, f.hasData = b.Size, b.Size, true
	f.setBaseLocked(&b) // not live yet: indexed below
	f.attrs = baseAttrs(b)
	m.mu.Lock()
	g, stopped := m.files[t], m.stopped
	deleting := m.deleting[bt] > 0 || m.strayLocked(bt)
	if g == nil && !deleting && !stopped {
		f.live = true
		f.indexLiveLocked()
		m.setFileLocked(t, f)
		m.byID[f.id] = f
	}
	m.mu.Unlock()
	if f.live {
		return f, nil
	}
	fd.Close()
	os.Remove(m.j.dataPath(f.id))
	switch {
	case stopped:
		return nil, syscall.EROFS
	case g != nil: // lost a race with another opener
		return g, nil
	}
	return nil, errDeleting
}

// baseAttrs are the attributes of a file opened on the object b: its
// metadata's, with the defaults of an object written by another tool
// (mode 0644, its modification time). A special file's type is dropped:
// a file with data is a regular file.
func baseAttrs(b objstore.ObjectInfo) Attrs {
	a := ParseAttrs(b.Metadata)
	if !a.HasMode {
		a.Mode, a.HasMode = 0o644, true
	}
	a.Mode &= 0o7777
	if a.Mtime.IsZero() {
		a.Mtime = b.ModTime
	}
	if a.Ctime.IsZero() {
		a.Ctime = a.Mtime
	}
	return a
}
