package fusefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// The end of a FUSE session. The kernel ends the session when the mount
// goes away: an unmount (ours, or umount / fusermount3 -u from outside),
// a lazy unmount (umount -l) once the last file or working directory on
// the mount is released, or an abort (umount -f). go-fuse's serve loops
// then read ENODEV and return; Server.Done is closed after that.
//
// Handles the kernel never released: an abort drops the RELEASE (and
// FLUSH) of every file still open, and the superblock's teardown after
// an unmount may drop the asynchronous RELEASE of the last close. No
// request can reach ferry once the session has ended, so these handles
// are released here: a file open for writing is then staged as closed
// with the bytes the kernel acknowledged to the writer, and uploaded (the
// writer saw ENOTCONN for anything later; a writer passed through to its
// staging file sees it at close, and its later bytes stay out of the
// upload).
//
// Which of them were still open: the kernel ends a session by an unmount
// only once nothing on the mount is open (umount fails with EBUSY
// before, umount -l waits), so then none was. An abort (umount -f, the
// connection's abort file) ends it with files open, and a busy mount
// stays attached, dead (ENOTCONN): the write handles released then are
// reported (Orphans). FLUSH cannot tell: a shell's "echo >&3" closes a
// duplicate of the descriptor, so the file sees a flush per line.

// session is what the nodes of one mount share: the handles the kernel
// has not released.
type session struct {
	mu     sync.Mutex           // guards open and ended
	open   map[*handle]struct{} // handles not yet released
	ended  bool                 // take ran (watch or Abandon): no more tracking
	closed chan struct{}        // closed when the session ended (Server.Done)
	kins   kins                 // the nodes of split names (kin.go); its own lock
}

func newSession() *session {
	return &session{open: map[*handle]struct{}{}, closed: make(chan struct{})}
}

func (s *session) add(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.open[h] = struct{}{}
	}
}

func (s *session) drop(h *handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, h)
}

// take returns the handles still open and stops tracking; false when
// that was done already.
func (s *session) take() ([]*handle, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, false
	}
	s.ended = true
	out := make([]*handle, 0, len(s.open))
	for h := range s.open {
		out = append(out, h)
	}
	s.open = nil
	return out, true
}

// Orphan is a file open for writing when the session was aborted, which
// ferry closed in the writer's place, or one whose release failed.
type Orphan struct {
	Path string // mount-relative path ("" when the file had lost its name)
	Err  error  // the staging error of the release, if any
}

// watch waits for the end of the session, releases the handles the
// kernel did not (unless Abandon came first), and closes sess.closed.
// Owner: Mount starts it; it ends with the session (at the latest when
// the process exits).
func (s *Server) watch() {
	s.srv.Wait()
	aborted := s.deadHere()
	hs, _ := s.sess.take()
	for _, h := range hs {
		p, _ := h.n.path()
		h.n.detach(h)
		if aborted && h.write {
			h.h.FreezeExternal() // its later writes fail, not vanish
		}
		err := h.h.Release()
		if h.write && (aborted || err != nil) {
			s.orphans = append(s.orphans, Orphan{Path: p, Err: err})
		}
	}
	// Writers closed while a mapping of the mount lived (mapwait.go): a
	// mapping that outlives the mount fails its later writes, not lose them.
	held, mapped := s.pt.mapw.end()
	for _, h := range held {
		p, _ := h.n.path()
		if mapped {
			h.h.FreezeExternal()
		}
		if err := h.h.Release(); err != nil || mapped {
			s.orphans = append(s.orphans, Orphan{Path: p, Err: err})
		}
	}
	close(s.sess.closed)
}

// Done is closed when the FUSE session has ended (see the comment at the
// top of session.go), after the handles the kernel did not release have
// been released.
func (s *Server) Done() <-chan struct{} { return s.sess.closed }

// Orphans returns the files open for writing when the session was
// aborted, which ferry closed itself (and those whose release failed).
// Valid once Done is closed.
func (s *Server) Orphans() []Orphan {
	select {
	case <-s.sess.closed:
		return s.orphans
	default:
		return nil
	}
}

// Settle waits for the end of a session that is ending: when a dead
// mount is attached at the mount point (an abort), the serve loops are
// about to see it, and Settle returns once Done is closed (so that the
// handles the kernel dropped are released and Orphans is known). It
// returns at once for a live session (one STATFS request to it) and for
// one that has ended.
func (s *Server) Settle() {
	select {
	case <-s.Done():
		return
	default:
	}
	if s.deadHere() {
		<-s.Done()
	}
}

// Abandon stops the release of open handles at the end of the session,
// or waits until that release is done: call it after Unmount and before
// closing the vfs (a lazy unmount leaves the session alive while files
// are open on it).
func (s *Server) Abandon() {
	if _, ok := s.sess.take(); !ok {
		<-s.sess.closed
	}
}

// deadHere reports whether a dead FUSE mount is attached at the mount
// point (statfs fails with ENOTCONN): after the end of the session, this
// session's mount, aborted while busy. statfs always asks the file system
// (a stat of the root may be answered from the kernel's attribute cache).
func (s *Server) deadHere() bool {
	var st syscall.Statfs_t
	return errors.Is(syscall.Statfs(s.dir, &st), syscall.ENOTCONN)
}

// mountedHere reports whether this live session's mount is still
// attached at its mount point (per /proc/thread-self/mountinfo, this
// thread's namespace: /proc/self names the main thread's): false after a
// lazy unmount from outside, even when another file system was mounted
// on the directory since (while the session lives, no other mount has
// its device number). When mountinfo cannot be read it answers true.
func (s *Server) mountedHere() bool {
	if s.devID == "" {
		return true
	}
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return true
	}
	defer f.Close()
	found, err := mountinfoHas(bufio.NewScanner(f), s.dir, s.devID)
	if err != nil {
		return true
	}
	return found
}

// mountinfoHas scans mountinfo lines for a mount of device devID
// ("major:minor") at dir.
func mountinfoHas(sc *bufio.Scanner, dir, devID string) (bool, error) {
	dir = filepath.Clean(dir)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		if f[2] == devID && unescapeMountinfo(f[4]) == dir {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// devID is Linux's dev_t as "major:minor" (glibc's major() and minor()).
func devID(dev uint64) string {
	major, minor := devNums(dev)
	return fmt.Sprintf("%d:%d", major, minor)
}

// devNums splits a device number into its major and minor numbers.
func devNums(dev uint64) (major, minor uint64) {
	return (dev>>8)&0xfff | (dev>>32)&0xfffff000, dev&0xff | (dev>>12)&0xffffff00
}
