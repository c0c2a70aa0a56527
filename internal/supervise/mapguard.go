package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferry-fs/ferry/internal/vfs"
)

// The mapping guard. With cold passthrough a task reads cache files that
// are not whole yet: the kernel asks ferry before every read of such a
// file, but not before the page faults of a mapping of it (mmap of a
// FUSE passthrough file maps the backing file's page cache directly,
// where a hole reads as zeros). So the task runs under a seccomp filter
// that stops every mmap of a file (not anonymous memory) and asks ferry
// (SECCOMP_RET_USER_NOTIF): ferry makes the file whole when it is one of
// the mount's files passed through cold, then lets the call go on
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE), or fails it with EIO when it cannot.
// The filter is inherited by everything the task starts; fusefs hands a
// cold cache file only to processes under it (guarded), and an exec, or
// any other process, waits until the file is whole.
//
// Go cannot run code between fork and exec, so the task is started
// through this binary again (TaskArg): it installs the filter, sends the
// filter's listener to ferry over a socket, and execs the task.

// TaskArg is the hidden first argument that makes this binary install the
// mapping guard and exec the task (TaskMain).
const TaskArg = "__task"

// seccompNotif is struct seccomp_notif (include/uapi/linux/seccomp.h).
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// guardProgram is the filter: for this architecture's mmap of a file
// descriptor (not MAP_ANONYMOUS, fd not -1), ask the listener; allow
// everything else.
func guardProgram() ([]unix.SockFilter, error) {
	arch, nr, err := mmapSyscall()
	if err != nil {
		return nil, err
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	return []unix.SockFilter{
		{Code: ldAbs, K: 4},                               // 0: arch
		{Code: jeq, K: arch, Jt: 0, Jf: 7},                // 1: other arch: allow
		{Code: ldAbs, K: 0},                               // 2: syscall number
		{Code: jeq, K: nr, Jt: 0, Jf: 5},                  // 3: not mmap: allow
		{Code: ldAbs, K: 16 + 3*8},                        // 4: flags (low word)
		{Code: jset, K: unix.MAP_ANONYMOUS, Jt: 3, Jf: 0}, // 5: anonymous: allow
		{Code: ldAbs, K: 16 + 4*8},                        // 6: fd (low word)
		{Code: jeq, K: 0xffffffff, Jt: 1, Jf: 0},          // 7: fd -1: allow
		{Code: ret, K: unix.SECCOMP_RET_USER_NOTIF},       // 8: ask ferry
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},            // 9
	}, nil
}

// installGuard installs the filter on every thread of this process and
// returns its listener.
func installGuard() (int, error) {
	prog, err := guardProgram()
	if err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	flags := unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return -1, fmt.Errorf("seccomp: %w", e)
	}
	return int(fd), nil
}

// mapGuard is ferry's side of the guard for one task.
type mapGuard struct {
	fs    *vfs.FS
	mnt   string // the mount point
	dev   uint64 // the mount's device
	log   *slog.Logger
	root  atomic.Int32 // the task's pid, once it runs under the filter (0: no guarded process)
	lfd   int          // the listener (-1 before the task sent it)
	wake  [2]int       // a pipe: stop writes to it to end the loop
	ctx   context.Context
	stop_ context.CancelFunc
	wg    sync.WaitGroup // the loop and every handler
	calls atomic.Int64   // mappings asked about (for tests and the log)
	made  atomic.Int64   // of them, files made whole
	// sharedMu guards shared: the processes that mapped a file of the
	// mount shared (fusefs holds the release of a writer while such a
	// mapping is writable: Options.MapWriters).
	sharedMu sync.Mutex
	shared   map[int]struct{}
}

// newMapGuard prepares the guard of a task of the mount of fs (setMount
// names the mount once it is up).
func newMapGuard(fs *vfs.FS, log *slog.Logger) (*mapGuard, error) {
	g := &mapGuard{fs: fs, log: log, lfd: -1, wake: [2]int{-1, -1}}
	if err := unix.Pipe2(g.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	g.ctx, g.stop_ = context.WithCancel(context.Background())
	return g, nil
}

// setMount names the mount point (before the task starts).
func (g *mapGuard) setMount(mnt string) error {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return err
	}
	g.mnt, g.dev = strings.TrimSuffix(mnt, "/"), st.Dev
	return nil
}

// guarded reports whether pid runs under the task's filter: the task or
// one of its descendants (the filter is inherited; a process that left
// the task's tree, reparented elsewhere, is not counted, and reads as an
// unguarded one).
func (g *mapGuard) guarded(pid uint32) bool {
	if g == nil {
		return false
	}
	root := g.root.Load()
	if root == 0 {
		return false
	}
	p := int32(pid)
	for range 64 {
		if p == root {
			return true
		}
		if p <= 1 {
			return false
		}
		pp, err := parentOf(p)
		if err != nil {
			return false
		}
		p = pp
	}
	return false
}

// noteShared records that pid mapped a file of the mount shared.
func (g *mapGuard) noteShared(pid uint32) {
	g.sharedMu.Lock()
	defer g.sharedMu.Unlock()
	if g.shared == nil {
		g.shared = map[int]struct{}{}
	}
	g.shared[int(pid)] = struct{}{}
}

// mapWriters returns the live processes that mapped a file of the mount
// shared (fusefs.Options.MapWriters); exited ones are forgotten.
func (g *mapGuard) mapWriters() ([]int, bool) {
	g.sharedMu.Lock()
	defer g.sharedMu.Unlock()
	var pids []int
	for pid := range g.shared {
		if unix.Kill(pid, 0) == unix.ESRCH {
			delete(g.shared, pid)
			continue
		}
		pids = append(pids, pid)
	}
	return pids, true
}

// parentOf returns the parent pid of pid (/proc/<pid>/stat).
func parentOf(pid int32) (int32, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, errors.New("bad stat")
	}
	pp, err := strconv.Atoi(f[1])
	return int32(pp), err
}
