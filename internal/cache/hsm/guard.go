package hsm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
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
// used in a shared memory page, hiMark) and every event after. It exits
// once the group's mount mark is gone: the kernel drops it with the
// private mount, when the last file opened through it (a passthrough
// backing file of an open or a mapping) is gone, so no read can ask any
// more.

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

// RunGuard is the guardian's body: group and page are the descriptors
// GuardFiles made, ctl the read end of a pipe whose write end only ferry
// holds. It returns when ferry is gone and nothing can read through its
// private mount any more.
func RunGuard(group, page, ctl *os.File, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	defer runtime.KeepAlive(group) // its finalizer would close the group
	hm, err := mapHiMark(page)
	if err != nil {
		return fmt.Errorf("hsm guard: %w", err)
	}
	defer hm.close()
	gfd := int(group.Fd())
	io.Copy(io.Discard, ctl) // until ferry closes the pipe or dies
	ctl.Close()
	// Ferry is gone: its unanswered events fail.
	pending := 0
	for fd := int32(0); fd <= hm.load(); fd++ {
		if respond(gfd, fd, denyEIO) == nil {
			pending++
		}
	}
	denied := 0
	buf := make([]byte, eventBufBytes)
	var evs []event
	for markedMounts(gfd) > 0 {
		fds := []unix.PollFd{{Fd: int32(gfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(guardPoll/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("hsm guard: poll: %w", err)
		}
		if n <= 0 {
			continue
		}
		k, err := unix.Read(gfd, buf)
		if err != nil {
			continue
		}
		evs = parseEvents(buf[:k], evs[:0])
		for _, e := range evs {
			if e.fd >= 0 {
				respond(gfd, e.fd, denyEIO)
				unix.Close(int(e.fd))
				denied++
			}
		}
	}
	if pending+denied > 0 {
		log.Warn("ferry exited while files were being fetched for reads: those reads failed (EIO)", "pending", pending, "later", denied)
	}
	return nil
}

// markedMounts counts the mount marks of the group gfd (its fdinfo).
func markedMounts(gfd int) int {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(gfd))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "fanotify mnt_id:")
}

// guardPoll is how often the guardian looks at its mount mark.
var guardPoll = time.Second
