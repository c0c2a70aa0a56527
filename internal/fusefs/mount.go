package fusefs

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/vfs"
)

// Options configure a mount.
type Options struct {
	Debug   bool
	Metrics *metrics.FUSE
	// EntryTimeout and AttrTimeout bound how long the kernel trusts names
	// and attributes (default 1 s).
	EntryTimeout, AttrTimeout time.Duration
	// AllowOther lets users other than the one running ferry use the
	// mount (FUSE allow_other). Off by default: only ferry's user (and
	// root) see the files.
	AllowOther bool
	// ReadAheadKB is the kernel's readahead window on the mount, in KiB
	// (default 4096; negative leaves the kernel's). See setReadAhead.
	ReadAheadKB int
	// Passthrough is PassthroughAuto (the default), PassthroughOn or
	// PassthroughOff (see passthrough.go); BackingDir is a directory on
	// the file system of the cache's files, where the mount checks that
	// the kernel takes backing files from it.
	Passthrough string
	BackingDir  string
	// Guarded, when not nil, reports whether the process pid (a caller of
	// open) is one whose mappings ferry guards (see passthrough.go, cold
	// opens): only such a process's read-only opens may pass through a
	// cache file that is not whole yet. nil: none may.
	Guarded func(pid uint32) bool
	// WriteThrough, when not nil, reports whether the process pid (a
	// caller of open or create) may write a new file's staging file
	// itself (passthrough for writers, see passthrough.go). nil: none.
	WriteThrough func(pid uint32) bool
	// MapWriters, when not nil, returns the processes that may hold a
	// writable shared mapping of a file of the mount, and true; or false
	// when it does not know (every process is then looked at). See
	// mapwait.go.
	MapWriters func() ([]int, bool)
}

// maxRead is the largest READ request: the most go-fuse can splice
// through one pipe (pipe-max-size, 1 MiB by default, holds the data and
// the reply header), and a divisor of the cache's blocks and segments so
// that a request never spans two segment files.
const maxRead = 512 << 10

// defaultReadAheadKB is the kernel readahead window set on a mount:
// eight requests of maxRead in flight ahead of a sequential reader.
const defaultReadAheadKB = 4096

// Server is a mounted file system.
type Server struct {
	srv   *fuse.Server
	dir   string
	pt    *passthrough
	devID string   // the mount's device, "major:minor" ("" if unknown)
	sess  *session // the handles open on the mount; the end of the session
	// orphans is written by watch before it closes sess.closed and read
	// only after that (Orphans).
	orphans []Orphan
}

// Mount mounts v at dir. As root it calls mount(2) directly (no
// fusermount needed); otherwise it uses fusermount3.
func Mount(dir string, v *vfs.FS, opts Options) (*Server, error) {
	if opts.EntryTimeout == 0 {
		opts.EntryTimeout = time.Second
	}
	if opts.AttrTimeout == 0 {
		opts.AttrTimeout = time.Second
	}
	neg := time.Second
	switch opts.Passthrough {
	case "":
		opts.Passthrough = PassthroughAuto
	case PassthroughAuto, PassthroughOn, PassthroughOff:
	default:
		return nil, fmt.Errorf("passthrough %q: want auto, on or off", opts.Passthrough)
	}
	pt := &passthrough{m: opts.Metrics, pending: map[<-chan struct{}]int32{}, guarded: opts.Guarded, writeThrough: opts.WriteThrough}
	pt.mapw.writers = opts.MapWriters
	sess := newSession()
	root := &node{v: v, m: opts.Metrics, pt: pt, s: sess}
	mo := fuse.MountOptions{
		FsName:       "ferry",
		Name:         "ferry",
		MaxWrite:     1 << 20,
		MaxReadAhead: 1 << 20,
		// Asynchronous requests (readahead) in flight, all readers
		// together: each holds a go-fuse output buffer of maxRead while
		// ferry serves it (allocated even when the reply is spliced). 64,
		// with eight 512 KiB readahead requests per reader, took ferry's
		// peak RSS from 121 to 148 MiB with 32 readers; 16 (two readers'
		// windows) took a cold sequential read from 63 to 57 MiB at the
		// same speed, and wholly cached files pass through without
		// requests.
		MaxBackground:        16,
		DisableXAttrs:        true,
		DirectMount:          os.Geteuid() == 0,
		Debug:                opts.Debug,
		EnableLocks:          false,
		IgnoreSecurityLabels: true,
		AllowOther:           opts.AllowOther,
		// Reads of at most maxRead bytes (go-fuse puts max_read =
		// MaxWrite first; a later value wins with mount(2), the path
		// taken as root; through fusermount reads stay at MaxWrite and
		// Read copies what it cannot splice).
		Options: []string{fmt.Sprintf("max_read=%d", maxRead)},
		// Backing files may sit on a stacked file system one level deep
		// (a container's overlayfs /tmp); the mount itself cannot then be
		// stacked upon.
		MaxStackDepth: 2,
	}
	if opts.AllowOther {
		// Other users see the mount: the kernel checks their access
		// against each name's mode and owner (ferry's own user, when it
		// is not root, too).
		mo.Options = append(mo.Options, "default_permissions")
	}
	fsOpts := &fs.Options{
		MountOptions:    mo,
		EntryTimeout:    &opts.EntryTimeout,
		AttrTimeout:     &opts.AttrTimeout,
		NegativeTimeout: &neg,
		// Modes and owners are vfs's, as they are (mode 0 included).
		NullPermissions: true,
	}
	srv, err := fuse.NewServer(newRawFS(root, fsOpts, pt), dir, &fsOpts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	pt.srv = srv
	closeFUSEOnExec()
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if opts.Passthrough == PassthroughOff {
		pt.why = "turned off (--passthrough off)"
	} else if err := pt.probe(cmp.Or(opts.BackingDir, os.TempDir())); err != nil {
		pt.why = err.Error()
		if opts.Passthrough == PassthroughOn {
			srv.Unmount()
			return nil, fmt.Errorf("mount %s: --passthrough on: %w", dir, err)
		}
	} else {
		pt.on.Store(true)
	}
	if opts.ReadAheadKB == 0 {
		opts.ReadAheadKB = defaultReadAheadKB
	}
	if opts.ReadAheadKB > 0 {
		_ = setReadAhead(dir, opts.ReadAheadKB) // best effort: /sys may be read-only in a container
	}
	s := &Server{srv: srv, dir: dir, pt: pt, sess: sess}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil {
		s.devID = devID(uint64(st.Dev))
		pt.mapw.setDev(uint64(st.Dev))
	}
	go s.watch()
	return s, nil
}

// Passthrough reports whether opens of wholly cached files are served
// with FUSE passthrough, and if not, why not.
func (s *Server) Passthrough() (on bool, why string) { return s.pt.on.Load(), s.pt.why }

// setReadAhead sets the readahead window of the mount at dir (the
// read_ahead_kb of its backing device info). The kernel starts a FUSE
// mount at 128 KiB whatever max_readahead the daemon asks for, so a
// sequential reader's pages come in 128 KiB requests, one or two in
// flight: eight times the requests (and context switches) per byte of a
// 1 MiB request, and a pipeline too short to hide one round trip.
func setReadAhead(dir string, kb int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	return os.WriteFile(bdiPath(uint64(st.Dev)), []byte(strconv.Itoa(kb)), 0)
}

// bdiPath is the read_ahead_kb file of the device dev.
func bdiPath(dev uint64) string {
	return "/sys/class/bdi/" + devID(dev) + "/read_ahead_kb"
}

// WaitMount blocks until the kernel answers requests on the mount.
func (s *Server) WaitMount() error { return s.srv.WaitMount() }

// Unmount unmounts; it fails with EBUSY while files are open. A mount
// that is no longer attached at its mount point (unmounted from outside,
// also lazily) is left alone, and so is whatever was mounted there since.
// After the end of the session only a dead mount there (ENOTCONN: what
// an abort leaves) is unmounted: the session's device number is free
// then, and a new mount on the directory may have it.
func (s *Server) Unmount() error {
	select {
	case <-s.Done():
		if !s.deadHere() {
			return nil
		}
	default:
		if !s.mountedHere() {
			return nil
		}
	}
	return s.srv.Unmount()
}

// Wait blocks until the session has ended (see Done).
func (s *Server) Wait() { <-s.Done() }

// closeFUSEOnExec marks this process's descriptors of /dev/fuse
// close-on-exec (go-fuse opens the device without O_CLOEXEC): a task, or
// any process ferry starts, that inherited one would keep the session
// alive after ferry died, and its requests would wait for an answer
// forever instead of failing with ENOTCONN.
func closeFUSEOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
}
