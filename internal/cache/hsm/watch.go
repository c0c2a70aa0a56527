package hsm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// maxWhole bounds the set of inodes remembered as whole after their
// watches ended (a mapping can outlive every open; see Watch.Close).
const maxWhole = 1 << 16

// Watch routes the events of one inode to its Filler.
type Watch struct {
	l  *Listener
	id fileID
	fl Filler
	fd int // a descriptor of the inode (for its ignore mark); closed by Close

	// Guarded by l.mu:
	ignored bool // the ignore mark is set
	done    bool
}

// Watch routes the events of f's inode to fl until the Watch is closed.
// It must be called before any file made from an Open of that inode is
// handed to the kernel. A second Watch of the same inode replaces the
// first (which must not be used after).
func (l *Listener) Watch(f *os.File, fl Filler) (*Watch, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	w := &Watch{l: l, id: fileID{dev: st.Dev, ino: st.Ino}, fl: fl, fd: fd}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		unix.Close(fd)
		return nil, errors.New("hsm: listener closed")
	}
	delete(l.whole, w.id)
	l.watches[w.id] = w
	return w, nil
}

// Whole ends the events of the watched inode: its bytes are all present,
// so reads need no answer. It is idempotent.
func (w *Watch) Whole() error {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.ignored || w.done || l.closed {
		return nil
	}
	if err := markInode(l.gfd, w.fd, true); err != nil {
		return fmt.Errorf("hsm: ignore mark: %w", err)
	}
	w.ignored = true
	return nil
}

// Close ends the Watch. whole says the file's bytes are all present:
// later events for the inode (a mapping outlives every open of a file)
// are then allowed; otherwise they fail with EIO. The caller closes a
// Watch of a partial file only when nothing can read it any more.
func (w *Watch) Close(whole bool) {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	if l.watches[w.id] == w {
		delete(l.watches, w.id)
		if whole && len(l.whole) < maxWhole {
			l.whole[w.id] = struct{}{}
		}
	}
	if w.ignored && !l.closed {
		markInode(l.gfd, w.fd, false)
	}
	unix.Close(w.fd)
}
