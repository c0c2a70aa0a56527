package hsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filler makes ranges of one watched file present. Offsets and lengths
// come from the kernel (page aligned; a range may run past the end of
// the object: the Filler clips it). pid is the reading process as the
// listener's pid namespace sees it (0 when it cannot see it).
type Filler interface {
	// Ready reports, without blocking, whether [off, off+n) may be read
	// now. It is called for every event, in the order the reads came, on
	// the listener's reading goroutine: it is the place to follow a
	// reader's access pattern (readahead).
	Ready(off, n int64, pid int32) bool
	// Fill makes [off, off+n) present; an error denies the read (EIO).
	Fill(ctx context.Context, off, n int64, pid int32) error
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// Listener is a process's pre-content group over a private clone of the
// cache directory's mount. All methods are safe for concurrent use.
type Listener struct {
	log  *slog.Logger
	dir  string
	gfd  int      // the fanotify group (answers, marks)
	rd   *os.File // a non-blocking duplicate of gfd on the runtime's poller, read by loop; Close closes it
	tree int      // O_PATH descriptor of the detached clone of dir
	hi   *hiMark
	mnt  atomic.Pointer[mountRef] // the FUSE mount (SetMount)

	ctx    context.Context    // canceled by Close: fills in progress fail
	cancel context.CancelFunc //
	wg     sync.WaitGroup     // the read loop and every fill goroutine
	st     counters

	// mu guards the fields below.
	mu      sync.RWMutex
	watches map[fileID]*Watch
	whole   map[fileID]struct{} // inodes whose watch ended while whole: events for them are allowed
	warned  map[fileID]bool     // events for unknown inodes, logged once each
	closed  bool
}

// counters are the cumulative statistics behind Stats.
type counters struct {
	events, ready, filled, denied, unknown atomic.Int64
}

// Stats is a snapshot of a Listener's counters.
type Stats struct {
	Events  int64 // pre-content events read
	Ready   int64 // answered at once: the range was present
	Filled  int64 // answered after a fill
	Denied  int64 // answered EIO: the fill failed, or the file was not known
	Unknown int64 // events for files with no watch (of those, the ones not known whole were denied)
}

// Stats returns a snapshot of the counters.
func (l *Listener) Stats() Stats {
	return Stats{Events: l.st.events.Load(), Ready: l.st.ready.Load(), Filled: l.st.filled.Load(),
		Denied: l.st.denied.Load(), Unknown: l.st.unknown.Load()}
}

// UnavailableError says why pre-content events cannot be used for a
// cache directory.
type UnavailableError struct {
	Reason string // for people: "the cache dir is on overlayfs, which refuses pre-content events"
	Err    error
}

func (e *UnavailableError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

func unavailable(reason string, err error) error { return &UnavailableError{Reason: reason, Err: err} }

// Open starts a Listener for files under dir, or explains (an
// *UnavailableError) why this kernel, file system or process cannot have
// one. It checks the whole path once: a sparse test file opened through
// the private mount must raise an event that the listener answers.
func Open(dir string, log *slog.Logger) (*Listener, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Listener{log: log, dir: dir, gfd: -1, tree: -1,
		watches: map[fileID]*Watch{}, whole: map[fileID]struct{}{}, warned: map[fileID]bool{}}
	if err := l.open(); err != nil {
		l.closeFDs()
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop() // owner: the Listener; ended by Close
	return l, nil
}

func (l *Listener) open() error {
	gfd, err := unix.FanotifyInit(unix.FAN_CLASS_PRE_CONTENT|unix.FAN_CLOEXEC|unix.FAN_UNLIMITED_QUEUE,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	switch {
	case errors.Is(err, unix.EPERM):
		return unavailable("no CAP_SYS_ADMIN (fanotify_init refused)", err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return unavailable("the kernel has no fanotify permission events", err)
	case err != nil:
		return unavailable("fanotify_init failed", err)
	}
	l.gfd = gfd
	tree, err := unix.OpenTree(unix.AT_FDCWD, l.dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	switch {
	case errors.Is(err, unix.EPERM):
		return unavailable("no CAP_SYS_ADMIN (open_tree refused a private mount of the cache dir)", err)
	case errors.Is(err, unix.ENOSYS):
		return unavailable("a kernel older than 5.2 (no open_tree)", err)
	case err != nil:
		return unavailable("a private mount of the cache dir failed", err)
	}
	l.tree = tree
	if err := markMount(gfd, tree); err != nil {
		switch {
		case errors.Is(err, unix.EINVAL):
			return unavailable("the kernel has no pre-content events (Linux 6.14+ with CONFIG_FANOTIFY_ACCESS_PERMISSIONS)", err)
		case errors.Is(err, unix.EOPNOTSUPP):
			return unavailable(fmt.Sprintf("the cache dir is on %s, which refuses pre-content events (put the cache on ext4, xfs or btrfs)", fsName(l.dir)), err)
		default:
			return unavailable("fanotify_mark of the cache dir's private mount failed", err)
		}
	}
	hi, err := newHiMark()
	if err != nil {
		return unavailable("memfd for the guardian", err)
	}
	l.hi = hi
	if err := l.selfTest(); err != nil {
		return err
	}
	return l.openReader()
}

// openReader makes the descriptor loop reads events from: a duplicate of
// the group, non-blocking, so that the read waits on the runtime's poller
// (epoll) rather than in a poll(2) that holds one of the runtime's Ps in
// a system call. The runtime's monitor takes such a P back (after 20 µs
// when other goroutines wait to run, after 10 ms in any case), and each
// time it does, it goes back to looking every 20 µs. With a ferry per
// task, 8 ferries reading one cold 1 GiB file at once slept the monitor
// 57-73k times against 76-91k and switched context 100-125k times
// against 121-145k (two series of alternating runs, 2026-12-06); their
// CPU was 211 against 235 ticks (medians of 5) in the first series and
// the same in the second, on a slower machine. O_NONBLOCK is a flag of
// the open file, shared with the group descriptor and the guardian's
// copy, which poll before they read.
func (l *Listener) openReader() error {
	fd, err := unix.FcntlInt(uintptr(l.gfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return unavailable("dup of the fanotify group", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return unavailable("a non-blocking fanotify group", err)
	}
	l.rd = os.NewFile(uintptr(fd), "fanotify")
	return nil
}

// dot is the path "." for fanotify_mark relative to a descriptor.
var dot = [2]byte{'.', 0}

// markMount marks the mount of the O_PATH descriptor fd (FAN_PRE_ACCESS).
func markMount(gfd, fd int) error {
	_, _, e := unix.Syscall6(unix.SYS_FANOTIFY_MARK, uintptr(gfd), uintptr(unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT),
		uintptr(unix.FAN_PRE_ACCESS), uintptr(fd), uintptr(unsafe.Pointer(&dot[0])), 0)
	if e != 0 {
		return e
	}
	return nil
}

// markInode adds (or removes) an ignore mark for FAN_PRE_ACCESS on the
// inode of the regular descriptor fd.
func markInode(gfd, fd int, add bool) error {
	flags := unix.FAN_MARK_IGNORE | unix.FAN_MARK_IGNORED_SURV_MODIFY
	if add {
		flags |= unix.FAN_MARK_ADD
	} else {
		flags = unix.FAN_MARK_REMOVE | unix.FAN_MARK_IGNORE
	}
	_, _, e := unix.Syscall6(unix.SYS_FANOTIFY_MARK, uintptr(gfd), uintptr(flags),
		uintptr(unix.FAN_PRE_ACCESS), uintptr(fd), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// Open opens name (a path relative to the Listener's directory) for
// reading through the private mount: reads of the returned file, and of
// passthrough backing files made from it, raise events to this Listener.
func (l *Listener) Open(name string) (*os.File, error) {
	fd, err := unix.Openat(l.tree, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open (private mount)", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Close stops the Listener: fills in progress fail (their reads get EIO),
// and the group is closed. Reads of holes in files still open after that
// are answered by the guardian, if one runs; without it, the kernel
// allows them.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.rd.Close() // ends loop's read
	l.wg.Wait()
	l.closeFDs()
	return nil
}

func (l *Listener) closeFDs() {
	if l.rd != nil {
		l.rd.Close()
	}
	for _, fd := range []int{l.gfd, l.tree} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if l.hi != nil {
		l.hi.close()
	}
}

// fsName names the file system type of dir, for messages.
func fsName(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "a file system"
	}
	switch uint32(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.FUSE_SUPER_MAGIC:
		return "a FUSE file system"
	}
	return fmt.Sprintf("a file system of type %#x", uint32(st.Type))
}
