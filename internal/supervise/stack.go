package supervise

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/fusefs"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/azure"
	"github.com/ferry-fs/ferry/pkg/objstore/gcs"
	"github.com/ferry-fs/ferry/pkg/objstore/s3"
)

// stack is everything below the FUSE mount.
type stack struct {
	cfg    config.Config
	log    *slog.Logger
	reg    *metrics.Registry
	stores *stores
	wb     *writeback.Manager
	blocks *block.Cache
	meta   *meta.Cache
	fs     *vfs.FS
	srv    *fusefs.Server
	hooks  Hooks
	obs    *observer // metrics, /metrics listener, exit summary
	cold   *cold     // cold passthrough, when on (cold.go)
	procs  *procsGov // GOMAXPROCS at this ferry's share of the node (procs.go); nil: fixed
	// guard is the mapping guard of the task (ferry run; nil for ferry
	// mount): cold files are handed only to the processes it guards.
	guard *mapGuard
	task  bool // a task of its own (ferry run): set before mount
	// iso is the plan of the task's mount namespace (isolate.go); nil
	// for ferry mount, and when the task runs in ferry's namespace.
	iso *isolation
}

// stores creates one store per bucket on first use.
type stores struct {
	cfg config.Config
	log *slog.Logger
	obs *observer // nil: no instrumentation (prefetch)

	mu sync.Mutex                // guards m
	m  map[string]objstore.Store // "s3/bucket" -> store; guarded by mu
}

func (s *stores) resolve(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
	id := scheme + "/" + bucket
	s.mu.Lock()
	defer s.mu.Unlock() // creating a client does no network I/O
	if st, ok := s.m[id]; ok {
		return st, nil
	}
	var st objstore.Store
	var err error
	switch scheme {
	case "s3":
		c := s3.ConfigFromEnv()
		c.Bucket = bucket
		c.RequestTimeout = s.cfg.RequestTimeout
		st, err = s3.New(ctx, c)
	case "gs":
		c := gcs.ConfigFromEnv()
		c.Bucket = bucket
		st, err = gcs.New(ctx, c)
	case "az":
		c := azure.ConfigFromEnv()
		c.Container = bucket
		st, err = azure.New(ctx, c)
	default:
		return nil, fmt.Errorf("unknown scheme %q: %w", scheme, objstore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s://%s: %w", scheme, bucket, err)
	}
	log := s.log
	st = objstore.WithRetry(st, objstore.RetryPolicy{
		MaxAttempts:    s.cfg.MaxRetries,
		RequestTimeout: s.cfg.RequestTimeout,
		OnRetry: s.obs.retryHook(scheme, func(op string, attempt int, err error) {
			log.Warn("retrying backend request", "op", op, "attempt", attempt, "err", err.Error())
		}),
	})
	st = s.obs.wrapStore(st, scheme, log)
	// Outermost, so that the vfs (ghost prefixes in listings, see
	// objstore.Track) sees the writes of the write-back too.
	st = objstore.Track(st)
	s.m[id] = st
	return st, nil
}

func (s *stores) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		st.Close()
	}
}

// buildStack opens caches and the write-back journal. It does not mount.
func buildStack(ctx context.Context, cfg config.Config, log *slog.Logger, hooks Hooks) (*stack, error) {
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	s := &stack{cfg: cfg, log: log, reg: metrics.NewRegistry(), hooks: hooks}
	s.obs = newObserver(s.reg)
	s.stores = &stores{cfg: cfg, log: log, obs: s.obs, m: map[string]objstore.Store{}}
	var err error
	s.meta, err = meta.New(meta.Config{StatTTL: cfg.StatTTL, ListTTL: cfg.ListTTL, NegativeTTL: cfg.NegativeTTL})
	if err != nil {
		return nil, err
	}
	s.blocks, err = block.New(block.Config{
		Dir: filepath.Join(cfg.CacheDir, "blocks"), MaxBytes: cfg.CacheSize,
		MaxConcurrency: cfg.Downloads, FillRandomUpTo: cfg.FillRandomUpTo, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("block cache: %w", err)
	}
	s.wb, err = writeback.New(ctx, writeback.Config{
		Dir: filepath.Join(cfg.CacheDir, "writeback"), Concurrency: cfg.Uploads, PartSize: cfg.PartSize,
		OrderLast: hooks.OrderLast, PutOptions: hooks.PutOptions, Logger: log,
		// Only with fine-grained change times (see writeback's external.go);
		// without passthrough fusefs never asks for a staging file.
		ExternalWrites: cfg.WritePassthrough != "off" && cfg.Passthrough != "off" && kernelAtLeast(6, 13),
	}, s.stores.resolve)
	if err != nil {
		s.blocks.Close()
		return nil, fmt.Errorf("write-back journal: %w", err)
	}
	s.obs.attach(s.blocks, s.wb)
	s.procs = startProcs(os.Getenv("GOMAXPROCS") != "", s.wb.NodePeers, log)
	s.obs.dirReadahead = cfg.DirReadahead
	// With --allow-other the kernel checks permissions against the
	// attributes: they must be each object's own (vfs.Options.ExactAttrs).
	s.fs = vfs.New(vfs.Options{ExactAttrs: cfg.AllowOther, DirReadahead: cfg.DirReadahead}, vfs.Deps{
		Resolve: s.stores.resolve, Writeback: s.wb, Blocks: s.blocks, Meta: s.meta, Logger: log,
	})
	return s, nil
}

// mount mounts the vfs at the mount point, clearing a stale mount left by
// a killed process first.
func (s *stack) mount() error {
	dir := s.cfg.MountPoint
	if _, err := os.Stat(dir); err != nil && !os.IsNotExist(err) {
		lazyUnmount(dir) // "transport endpoint is not connected"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is not available (run the container with --device /dev/fuse --cap-add SYS_ADMIN): %w", err)
	}
	if s.iso != nil {
		if err := s.iso.bindMountPoint(); err != nil {
			if s.iso, err = s.iso.unavailable(err); err != nil {
				return err
			}
		}
	}
	opts := fusefs.Options{
		Metrics: metrics.NewFUSE(s.reg), AllowOther: s.cfg.AllowOther,
		Passthrough: s.cfg.Passthrough, BackingDir: s.blocks.Config().Dir,
	}
	switch {
	case s.cfg.ColdPassthrough == "unguarded":
		opts.Guarded = func(uint32) bool { return true }
	case s.task:
		g, err := newMapGuard(s.fs, s.log)
		if err != nil {
			s.iso.unbindMountPoint()
			return err
		}
		s.guard = g
		opts.Guarded = g.guarded
		opts.MapWriters = g.mapWriters
	}
	switch {
	case s.cfg.WritePassthrough == "on":
		opts.WriteThrough = func(uint32) bool { return true }
	case s.cfg.WritePassthrough == "off" || !s.task:
	case s.guard != nil:
		opts.WriteThrough = s.guard.guarded
	default: // the task's processes are not known apart (unguarded)
		opts.WriteThrough = func(uint32) bool { return true }
	}
	srv, err := fusefs.Mount(dir, s.fs, opts)
	if err != nil {
		s.iso.unbindMountPoint()
		return err
	}
	s.srv = srv
	if s.iso != nil {
		s.iso.noteMounted()
	}
	if s.guard != nil {
		if err := s.guard.setMount(dir); err != nil {
			s.unmount()
			return err
		}
	}
	if on, why := srv.Passthrough(); on {
		s.log.Info("FUSE passthrough on: the kernel reads wholly cached files from the cache without ferry")
	} else {
		s.log.Info("FUSE passthrough off: reads go through ferry", "reason", why)
	}
	if err := s.startCold(); err != nil {
		s.unmount()
		return err
	}
	// fusefs.Mount returned once the mount answered. (Waiting again
	// opened a file in the mount point after the task, or a test, could
	// already have unmounted it: ENOENT, and ferry exited 1 at start.)
	return nil
}

// taskGuard returns the mapping guard to start the task under: when cold
// passthrough is on (nil otherwise: the task gets no cold files).
func (s *stack) taskGuard() *mapGuard {
	if s.cold == nil || s.guard == nil {
		return nil
	}
	return s.guard
}

// unmount unmounts, lazily when something still holds the mount. A mount
// unmounted from outside is left alone (fusefs.Server.Unmount).
func (s *stack) unmount() {
	if s.srv == nil {
		return
	}
	if err := s.srv.Unmount(); err != nil {
		s.log.Warn("unmount busy, detaching lazily", "mount_point", s.cfg.MountPoint, "err", err.Error())
		lazyUnmount(s.cfg.MountPoint)
	}
	s.srv.Abandon() // no handle is released behind close's back
	s.srv = nil
	s.iso.unbindMountPoint() // the FUSE mount is gone: the bind under it goes too
}

// ended returns a channel closed when the FUSE session ends: the mount
// was unmounted (or aborted) from outside while ferry served it.
func (s *stack) ended() <-chan struct{} { return s.srv.Done() }

// noteEnded logs, once the session has ended before ferry's own unmount,
// that it did and which files ferry closed in their writers' place.
func (s *stack) noteEnded() {
	s.srv.Settle() // a task that died of an abort may be seen before the end of the session
	select {
	case <-s.srv.Done():
	default:
		return
	}
	s.log.Warn("the mount was unmounted (or aborted) from outside; draining what was staged, then exiting", "mount_point", s.cfg.MountPoint)
	for _, o := range s.srv.Orphans() {
		p := filepath.Join(s.cfg.MountPoint, o.Path)
		if o.Path == "" {
			p = "(a deleted file)"
		}
		if o.Err != nil {
			s.log.Error("a file open for writing when the mount ended could not be staged", "path", p, "err", o.Err.Error())
			continue
		}
		s.log.Warn("a file was open for writing when the mount ended: ferry closed it and uploads the bytes written until then (later ones are not uploaded: a write through ferry failed with ENOTCONN, a writer the kernel passed through saw ENOTCONN at close)", "path", p)
	}
}

// close releases everything (after drain and unmount).
func (s *stack) close() {
	s.procs.stop()
	s.fs.Close()
	s.wb.Close()
	s.blocks.Close()
	s.cold.stop()
	s.meta.Close()
	s.stores.closeAll()
	s.obs.close()
}
