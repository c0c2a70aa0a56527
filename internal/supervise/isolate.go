package supervise

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/ferry-fs/ferry/internal/config"
)

// The task's mount namespace (ferry run, fusion; --isolate-cache).
//
// ferry's cache directory holds every cached object of every bucket in
// clear and the staged, not yet durable, outputs; with FUSION_CACHE_LOCATION
// it is usually shared by every task container on the node. The task does
// not need it, so it runs in a mount namespace of its own in which the
// cache directory (wherever the namespace shows it) is covered by an
// empty, read-only tmpfs with mode 000, as runc masks paths: listing it
// shows nothing (or fails, for a task that is not root), reading,
// creating or deleting anything under it fails. ferry keeps its own
// namespace, so its view and its descriptors are unchanged; the task's
// view is otherwise the same (cwd, environment, /fusion, /tmp).
//
// How, in Go: unshare(CLONE_NEWNS) changes the calling thread only. The
// task is already forked from a thread locked for the task's life
// (startAndWait); that thread unshares, sets the namespace up and forks,
// and is never unlocked, so the runtime ends it with its goroutine
// instead of running other goroutines in the task's namespace (and new
// threads are cloned from the runtime's template thread, never from a
// locked one).
//
// Propagation: the new namespace's mounts are made slaves (MS_REC |
// MS_SLAVE): nothing mounted in it (the covers) propagates out, while
// unmounts from ferry's namespace propagate in. For ferry's own mount
// that needs a shared parent: the mount point is first bind-mounted on
// itself and made shared (bindMountPoint), and the FUSE mount goes on
// that bind. Then an umount from outside reaches the task's copy too,
// refused as "busy" while the task uses it, exactly as without a
// namespace, and the FUSE session ends as before. (A private copy
// would keep the file system alive after ferry's own unmount, and a
// plain umount from outside would no longer end the session.)
//
// A new namespace holds a copy of every mount of ferry's, and a copy of
// another FUSE file system keeps that file system alive after its own
// unmount: its daemon (another ferry on the same host namespace) would
// wait for this task to end. So FUSE mounts other than ferry's own that
// would not see their unmount propagate (private copies) are detached
// from the task's namespace.
//
// Where the namespace cannot be made (no CAP_SYS_ADMIN: ferry is not
// root, or mounts through fusermount3; a seccomp profile or a security
// module that refuses unshare or mount), --isolate-cache=auto runs the
// task as before with one warning naming the reason, and on fails
// start-up. planIsolation tries the whole setup on a throwaway thread
// before the mount, so that both happen before anything is mounted.

// isolation is the plan for the task's namespace.
type isolation struct {
	log        *slog.Logger
	mode       string // config.IsolateAuto or IsolateOn
	cacheDir   string // clean, absolute, symlinks resolved
	mountPoint string // clean, absolute
	// fuseDev is ferry's FUSE mount's device ("major:minor"), set once
	// mounted: its copy stays in the task's namespace.
	fuseDev string
	// bindID is the mount id of the shared bind of the mount point
	// (bindMountPoint); 0 when there is none.
	bindID int
}

// coverOpts are the cover's mount flags and options: an empty read-only
// tmpfs that no one but root may even list.
const (
	coverFlags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	coverData  = "size=4k,nr_inodes=1,mode=000"
	coverName  = "ferry-cover"
)

// planIsolation decides whether the task gets a namespace of its own: nil
// when it is turned off, or when it cannot be made under auto (after one
// warning naming the reason); an error when it cannot be made under on.
// The cache directory must exist.
func planIsolation(cfg config.Config, log *slog.Logger) (*isolation, error) {
	mode, err := config.ParseSwitch(cfg.IsolateCache)
	if err != nil {
		return nil, err
	}
	if mode == config.IsolateOff {
		log.Debug("the task runs in ferry's mount namespace (--isolate-cache off)")
		return nil, nil
	}
	iso := &isolation{log: log, mode: mode, mountPoint: filepath.Clean(cfg.MountPoint)}
	if err := iso.check(cfg.CacheDir); err != nil {
		return iso.unavailable(err)
	}
	if err := iso.probe(); err != nil {
		return iso.unavailable(err)
	}
	return iso, nil
}

// unavailable reports that the namespace cannot be made: a warning and
// nil under auto, an error under on.
func (iso *isolation) unavailable(why error) (*isolation, error) {
	if iso.mode == config.IsolateOn {
		return nil, fmt.Errorf("--isolate-cache on: the task cannot get a mount namespace without the cache directory: %w", why)
	}
	iso.log.Warn("the task can reach ferry's cache directory (no mount namespace of its own for it)", "reason", why.Error())
	return nil, nil
}

// check resolves the cache directory and refuses layouts the cover
// cannot serve.
func (iso *isolation) check(cacheDir string) error {
	abs, err := filepath.Abs(cacheDir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return fmt.Errorf("resolving the cache directory: %w", err)
	}
	iso.cacheDir = abs
	if within(iso.mountPoint, abs) {
		return fmt.Errorf("the mount point %s is inside the cache directory %s", iso.mountPoint, abs)
	}
	if wd, err := os.Getwd(); err == nil {
		if rwd, err := filepath.EvalSymlinks(wd); err == nil && within(rwd, abs) {
			return fmt.Errorf("the working directory %s is inside the cache directory %s", rwd, abs)
		}
	}
	return nil
}

// probe makes a namespace with the cache directory covered on a thread
// of its own, which then ends with the namespace.
func (iso *isolation) probe() error {
	errc := make(chan error, 1)
	go func() { // owner: probe, which waits for it
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- iso.setup(false)
	}()
	return <-errc
}

// enter moves the calling thread (locked, and never unlocked afterwards)
// into a new mount namespace set up for the task.
func (iso *isolation) enter() error { return iso.setup(true) }

// setup unshares the calling thread's mount namespace, makes its mounts
// slaves and covers the cache directory; full also covers every other
// place the namespace shows it and detaches foreign FUSE mounts.
func (iso *isolation) setup(full bool) error {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return unshareError(err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mounts of the task's namespace slaves: %w", err)
	}
	covers := []string{iso.cacheDir}
	if full {
		ms, err := readMountinfo()
		if err != nil {
			return fmt.Errorf("reading the task namespace's mount table: %w", err)
		}
		if n := detachForeign(ms, iso.fuseDev); n > 0 {
			iso.log.Debug("detached other FUSE mounts from the task's namespace", "count", n)
		}
		covers = coverPaths(ms, iso.cacheDir)
	}
	for _, p := range covers {
		if err := syscall.Mount(coverName, p, "tmpfs", coverFlags, coverData); err != nil {
			return fmt.Errorf("covering %s in the task's namespace: %w (a security module may forbid mounts)", p, err)
		}
	}
	if full {
		iso.log.Debug("the task runs in a mount namespace of its own; the cache directory is covered", "covered", strings.Join(covers, " "))
	}
	return nil
}

// cacheCovered reports whether the calling thread's namespace covers the
// cache directory dir (a ferry run task's: ferry's own tools run there
// should not expect to reach it).
func cacheCovered(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return false
	}
	ms, err := readMountinfo()
	if err != nil {
		return false
	}
	t, ok := tops(ms)[abs]
	return ok && t.fstype == "tmpfs" && t.source == coverName
}

// unshareError explains a refused unshare(CLONE_NEWNS).
func unshareError(err error) error {
	switch {
	case errors.Is(err, syscall.EPERM) && !hasCapSysAdmin():
		if os.Geteuid() != 0 {
			return fmt.Errorf("ferry does not run as root and has no CAP_SYS_ADMIN (the mount goes through fusermount3): unshare(CLONE_NEWNS): %w", err)
		}
		return fmt.Errorf("no CAP_SYS_ADMIN (run the container with --cap-add SYS_ADMIN): unshare(CLONE_NEWNS): %w", err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("unshare(CLONE_NEWNS) refused although ferry holds CAP_SYS_ADMIN: a seccomp profile or security module forbids it: %w", err)
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOSYS):
		return fmt.Errorf("no mount namespaces in this kernel: unshare(CLONE_NEWNS): %w", err)
	}
	return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
}

// capSysAdmin is CAP_SYS_ADMIN's bit number (linux/capability.h).
const capSysAdmin = 21

// hasCapSysAdmin reports whether CAP_SYS_ADMIN is in this process's
// effective set (in its user namespace).
func hasCapSysAdmin() bool {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capSysAdmin) != 0
		}
	}
	return false
}

// coverPaths lists every path where the namespace with mount table ms
// shows the directory dir: dir itself, the same directory through other
// mounts of its file system (a second bind of a parent), and mounts of
// directories below it. A path inside another is left out (the outer
// cover hides it).
func coverPaths(ms []mountEntry, dir string) []string {
	top := tops(ms)
	m, ok := mountOf(top, dir)
	if !ok {
		return []string{dir}
	}
	rel, err := filepath.Rel(m.point, dir)
	if err != nil {
		return []string{dir}
	}
	fsPath := filepath.Join(m.root, rel) // dir within its file system
	var want syscall.Stat_t
	if syscall.Stat(dir, &want) != nil {
		return []string{dir}
	}
	paths := []string{dir}
	for _, n := range top {
		if n.dev != m.dev || n.id == m.id {
			continue
		}
		var cand string
		switch {
		case within(fsPath, n.root):
			r, err := filepath.Rel(n.root, fsPath)
			if err != nil {
				continue
			}
			cand = filepath.Join(n.point, r)
			var st syscall.Stat_t
			if syscall.Stat(cand, &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
				continue // not reachable there (shadowed by another mount)
			}
		case within(n.root, fsPath):
			cand = n.point // a part of the cache mounted elsewhere
			if fi, err := os.Stat(cand); err != nil || !fi.IsDir() {
				continue
			}
		default:
			continue
		}
		paths = append(paths, cand)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) < len(paths[j]) })
	var out []string
	for _, p := range paths {
		inside := false
		for _, q := range out {
			inside = inside || within(p, q)
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

// detachForeign detaches, in the calling thread's namespace, the FUSE
// mounts foreignFUSE names. It returns how many it detached.
func detachForeign(ms []mountEntry, ours string) int {
	n := 0
	for _, p := range foreignFUSE(ms, ours) {
		if syscall.Unmount(p, syscall.MNT_DETACH) == nil {
			n++
		}
	}
	return n
}

// foreignFUSE lists the mount points of the FUSE mounts other than
// ferry's own (device ours) whose unmount would not propagate into the
// namespace of ms (private copies), outermost first, leaving out those
// below another one (detached with it) and under /proc and /sys.
func foreignFUSE(ms []mountEntry, ours string) []string {
	top := tops(ms)
	var cands []string
	for _, m := range ms {
		if t, ok := top[m.point]; ok && t.id == m.id && m.fuse() && m.dev != ours && !m.slave() {
			cands = append(cands, m.point)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return len(cands[i]) < len(cands[j]) })
	var out []string
	for _, p := range cands {
		skip := within(p, "/proc") || within(p, "/sys")
		for _, d := range out {
			skip = skip || within(p, d)
		}
		if !skip {
			out = append(out, p)
		}
	}
	return out
}
