package fusefs

import (
	"fmt"
	"os"
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
}

// Server is a mounted file system.
type Server struct {
	srv *fuse.Server
	dir string
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
	root := &node{v: v, m: opts.Metrics}
	mo := fuse.MountOptions{
		FsName:               "ferry",
		Name:                 "ferry",
		MaxWrite:             1 << 20,
		MaxReadAhead:         1 << 20,
		MaxBackground:        64,
		DisableXAttrs:        true,
		DirectMount:          os.Geteuid() == 0,
		Debug:                opts.Debug,
		EnableLocks:          false,
		IgnoreSecurityLabels: true,
		AllowOther:           opts.AllowOther,
	}
	srv, err := fs.Mount(dir, root, &fs.Options{
		MountOptions:    mo,
		EntryTimeout:    &opts.EntryTimeout,
		AttrTimeout:     &opts.AttrTimeout,
		NegativeTimeout: &neg,
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
	})
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	return &Server{srv: srv, dir: dir}, nil
}

// WaitMount blocks until the kernel answers requests on the mount.
func (s *Server) WaitMount() error { return s.srv.WaitMount() }

// Unmount unmounts; it fails with EBUSY while files are open.
func (s *Server) Unmount() error { return s.srv.Unmount() }

// Wait blocks until the file system is unmounted.
func (s *Server) Wait() { s.srv.Wait() }
