package hsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The guardian. When a process with a fanotify group dies, the kernel
// allows every event the group has not answered: a read waiting for a
// fill would return the hole's zeros. So a second process (the guardian)
// holds a copy of the group and waits on a pipe from ferry; when the pipe
// ends (ferry exited, or was killed), it denies with EIO every event
// ferry had read and not answered (the kernel matches an answer to its
// event by descriptor number: ferry keeps the highest number it has
// used in a shared memory page, hiMark) and every event after, until
// nothing on ferry's mount is open or mapped any more. Ferry sends it
// the mount's identity on the pipe once mounted.

// hiMark is a shared page holding the highest event descriptor number
// ferry has read.
type hiMark struct {
	f *os.File // the memfd
	m []byte   // its mapping
	v *int32   // in m
}

func newHiMark() (*hiMark, error) {
	fd, err := unix.MemfdCreate("ferry-hsm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "ferry-hsm")
	if err := f.Truncate(4096); err != nil {
		f.Close()
		return nil, err
	}
	return mapHiMark(f)
}

func mapHiMark(f *os.File) (*hiMark, error) {
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &hiMark{f: f, m: m, v: (*int32)(unsafe.Pointer(&m[0]))}, nil
}

// note raises the mark to fd.
func (h *hiMark) note(fd int32) {
	for {
		cur := atomic.LoadInt32(h.v)
		if fd <= cur || atomic.CompareAndSwapInt32(h.v, cur, fd) {
			return
		}
	}
}

func (h *hiMark) load() int32 { return atomic.LoadInt32(h.v) }

func (h *hiMark) close() {
	unix.Munmap(h.m)
	h.f.Close()
}

// GuardFiles returns new descriptors of the group and of the shared page
// for a guardian process (its first two extra files); the caller closes
// them once the guardian has started.
func (l *Listener) GuardFiles() (group, page *os.File, err error) {
	g, err := unix.FcntlInt(uintptr(l.gfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	p, err := unix.FcntlInt(l.hi.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(g)
		return nil, nil, err
	}
	return os.NewFile(uintptr(g), "fanotify"), os.NewFile(uintptr(p), "ferry-hsm"), nil
}

// MountMessage is the line ferry writes on the guardian's pipe once its
// mount is up: the mount's id (statx STATX_MNT_ID) and device.
func MountMessage(dir string) (string, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &sx); err != nil {
		return "", err
	}
	return fmt.Sprintf("mount %d %d %d\n", sx.Mnt_id, sx.Dev_major, sx.Dev_minor), nil
}

// mountRef names ferry's FUSE mount for InUse.
type mountRef struct {
	id           uint64
	major, minor uint32
}

// SetMount tells the Listener which mount its backing files serve (the
// FUSE mount at dir), for Mapped.
func (l *Listener) SetMount(dir string) error {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &sx); err != nil {
		return err
	}
	l.mnt.Store(&mountRef{id: sx.Mnt_id, major: sx.Dev_major, minor: sx.Dev_minor})
	return nil
}

// Mapped reports whether any process this one can see maps a file of the
// mount SetMount named (true when it was not named: a mapping cannot be
// ruled out). A file mapped through a passthrough open keeps reading its
// backing file after the open is closed.
func (l *Listener) Mapped() bool {
	m := l.mnt.Load()
	if m == nil {
		return true
	}
	dev := fmt.Sprintf(" %02x:%02x ", m.major, m.minor)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil && mapsDevice("/proc/"+p.Name()+"/maps", dev) {
			return true
		}
	}
	return false
}

// RunGuard is the guardian's body: group and page are the descriptors
// GuardFiles made, ctl the pipe from ferry. It returns when nothing can
// read ferry's files any more after ferry has gone.
func RunGuard(group, page, ctl *os.File, log *slog.Logger) error {
	hm, err := mapHiMark(page)
	if err != nil {
		return fmt.Errorf("hsm guard: %w", err)
	}
	defer hm.close()
	gfd := int(group.Fd())
	var mnt *mountRef
	sc := bufio.NewScanner(ctl)
	for sc.Scan() { // until ferry closes the pipe or dies
		var m mountRef
		if _, err := fmt.Sscanf(sc.Text(), "mount %d %d %d", &m.id, &m.major, &m.minor); err == nil {
			mnt = &m
		}
	}
	// Ferry is gone: its unanswered events fail.
	pending := 0
	for fd := int32(0); fd <= hm.load(); fd++ {
		if respond(gfd, fd, denyEIO) == nil {
			pending++
		}
	}
	denied := 0
	idle := 0
	buf := make([]byte, eventBufBytes)
	var evs []event
	for idle < 2 {
		fds := []unix.PollFd{{Fd: int32(gfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(guardPoll/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("hsm guard: poll: %w", err)
		}
		if n > 0 {
			k, err := unix.Read(gfd, buf)
			if err == nil {
				evs = parseEvents(buf[:k], evs[:0])
				for _, e := range evs {
					if e.fd >= 0 {
						respond(gfd, e.fd, denyEIO)
						unix.Close(int(e.fd))
						denied++
					}
				}
			}
			continue
		}
		if mnt == nil || !InUse(mnt.id, mnt.major, mnt.minor) {
			idle++
		} else {
			idle = 0
		}
	}
	if pending+denied > 0 {
		log.Warn("ferry exited while files were being fetched for reads: those reads failed (EIO)", "pending", pending, "later", denied)
	}
	return nil
}

// InUse reports whether any process this one can see has a descriptor
// open on the mount with id mntID, or a mapping of a file on the device
// major:minor (the mount's).
func InUse(mntID uint64, major, minor uint32) bool {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	dev := fmt.Sprintf(" %02x:%02x ", major, minor)
	want := "mnt_id:\t" + strconv.FormatUint(mntID, 10) + "\n"
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if mapsDevice("/proc/"+p.Name()+"/maps", dev) || fdsOnMount("/proc/"+p.Name(), want) {
			return true
		}
	}
	return false
}

// mapsDevice reports whether the maps file lists a mapping of dev
// (" MM:mm ").
func mapsDevice(path, dev string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if strings.Contains(line, dev) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// fdsOnMount reports whether a descriptor of the process at proc has the
// fdinfo line want ("mnt_id:\t<id>\n").
func fdsOnMount(proc, want string) bool {
	ents, err := os.ReadDir(proc + "/fdinfo")
	if err != nil {
		return false
	}
	buf := make([]byte, 512)
	for _, e := range ents {
		f, err := os.Open(proc + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		n, _ := io.ReadFull(f, buf)
		f.Close()
		if strings.Contains(string(buf[:n]), want) {
			return true
		}
	}
	return false
}

// guardPoll is how often the guardian looks for users of ferry's mount.
var guardPoll = time.Second
