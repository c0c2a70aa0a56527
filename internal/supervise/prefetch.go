package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// DefaultPrefetchFiles is how many files Prefetch warms at once.
const DefaultPrefetchFiles = 4

// PrefetchOptions configure Prefetch.
type PrefetchOptions struct {
	// Logger receives a line per failed file and a closing summary;
	// default: discard.
	Logger *slog.Logger
	// Progress, when set, receives reports with Op "prefetch" (Total is
	// the bytes of every matched file, cached or not), then a Final one.
	Progress ProgressFunc
	// Files is how many files are warmed at once; default
	// DefaultPrefetchFiles.
	Files int
	// Resolve, when set, replaces the store resolver built from cfg and
	// the environment (tests pass in-memory stores).
	Resolve func(ctx context.Context, scheme, bucket string) (objstore.Store, error)
}

// prefetchFile is one object to warm.
type prefetchFile struct {
	scheme, bucket string
	info           objstore.ObjectInfo
}

// Prefetch warms the block cache under cfg.CacheDir with the objects that
// paths name, so that a later ferry using the same cache directory reads
// them without going to the network. A path is a file or directory under
// cfg.MountPoint (/fusion/s3/bucket/key), or a URL (s3://bucket/key); a
// directory means every object under it; a path whose key has glob
// characters (* ? [ as in path.Match, where * does not cross /) is
// expanded by listing the bucket, and a match on a directory takes
// everything under it. Relative paths are taken from $PWD. Nothing is
// read through the mount, so Prefetch works with or without one; except
// inside the task of a ferry run, whose namespace covers the cache
// directory (isolate.go): there the files are read through the mount,
// and the task's ferry fetches them into its cache.
//
// Files that fail do not stop the others; the error joins every failure.
// A path that matches nothing is an error wrapping objstore.ErrNotFound;
// one outside the mount point or with a bad pattern is an error too (and
// nothing is fetched then).
func Prefetch(ctx context.Context, cfg config.Config, paths []string, opts PrefetchOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Files <= 0 {
		opts.Files = DefaultPrefetchFiles
	}
	resolve := opts.Resolve
	if resolve == nil {
		ss := &stores{cfg: cfg, log: log, m: map[string]objstore.Store{}}
		defer ss.closeAll()
		resolve = ss.resolve
	}
	files, err := expandPaths(ctx, cfg.MountPoint, paths, resolve)
	if err != nil {
		return err
	}
	if cacheCovered(cfg.CacheDir) {
		log.Info("prefetch: the cache directory is covered (a ferry run task): reading the files through the mount, its ferry caches them", "mount_point", cfg.MountPoint)
		return warmAll(ctx, files, opts, log, func(ctx context.Context, f prefetchFile, progress func(int64)) error {
			return warmThroughMount(ctx, cfg.MountPoint, f, progress)
		})
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	blocks, err := block.New(block.Config{
		Dir: filepath.Join(cfg.CacheDir, "blocks"), MaxBytes: cfg.CacheSize,
		MaxConcurrency: cfg.Downloads, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("block cache: %w", err)
	}
	defer blocks.Close()
	return warmAll(ctx, files, opts, log, func(ctx context.Context, f prefetchFile, progress func(int64)) error {
		return warmOne(ctx, blocks, f, resolve, progress)
	})
}

// warmAll prefetches files with warm, opts.Files at a time, reporting
// progress.
func warmAll(ctx context.Context, files []prefetchFile, opts PrefetchOptions, log *slog.Logger, warm func(ctx context.Context, f prefetchFile, progress func(int64)) error) error {
	t0 := time.Now()
	var total int64
	for _, f := range files {
		total += f.info.Size
	}
	var (
		mu        sync.Mutex // guards the fields below and serializes opts.Progress
		done      int64      // bytes of finished files plus progress of running ones
		filesDone int
		errs      []error
	)
	report := func(final bool) { // with mu held
		if opts.Progress != nil {
			opts.Progress(Progress{Op: "prefetch", Done: done, Total: total, Files: filesDone,
				FilesTotal: len(files), Elapsed: time.Since(t0), Final: final})
		}
	}
	mu.Lock()
	report(false)
	mu.Unlock()

	sem := make(chan struct{}, opts.Files)
	var wg sync.WaitGroup
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() { // owner: warmAll, which waits on wg
			defer wg.Done()
			defer func() { <-sem }()
			var seen int64 // this file's bytes already added to done
			err := warm(ctx, f, func(n int64) {
				mu.Lock()
				done += n - seen
				seen = n
				report(false)
				mu.Unlock()
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				name := f.scheme + "://" + f.bucket + "/" + f.info.Key
				log.Warn("prefetch failed", "object", name, "err", err.Error())
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				return
			}
			done += f.info.Size - seen
			filesDone++
			report(false)
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	report(true)
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	log.Info("prefetch done", "files", filesDone, "of", len(files), "bytes", done,
		"seconds", time.Since(t0).Seconds())
	return errors.Join(errs...)
}

// warmOne prefetches one object version into blocks.
func warmOne(ctx context.Context, blocks *block.Cache, f prefetchFile, resolve func(context.Context, string, string) (objstore.Store, error), progress func(int64)) error {
	st, err := resolve(ctx, f.scheme, f.bucket)
	if err != nil {
		return err
	}
	ref := block.Ref{
		Store: st, StoreID: f.scheme + "/" + f.bucket, Key: f.info.Key,
		Version: f.info.Version, Size: f.info.Size,
	}
	return blocks.Prefetch(ctx, ref, progress)
}

// warmThroughMount reads one object whole through the mount at
// mountPoint (its ferry fetches it into the cache).
func warmThroughMount(ctx context.Context, mountPoint string, f prefetchFile, progress func(int64)) error {
	fh, err := os.Open(filepath.Join(mountPoint, f.scheme, f.bucket, filepath.FromSlash(f.info.Key)))
	if err != nil {
		return err
	}
	defer fh.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for ctx.Err() == nil {
		m, err := fh.Read(buf)
		n += int64(m)
		progress(n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// expandPaths turns the paths into the objects to warm, each once, in the
// order given (then lexical within one path).
func expandPaths(ctx context.Context, mountPoint string, paths []string, resolve func(context.Context, string, string) (objstore.Store, error)) ([]prefetchFile, error) {
	if len(paths) == 0 {
		return nil, errors.New("prefetch: no path given")
	}
	var out []prefetchFile
	seen := map[string]bool{}
	for _, p := range paths {
		scheme, bucket, key, err := splitPath(mountPoint, p)
		if err != nil {
			return nil, err
		}
		st, err := resolve(ctx, scheme, bucket)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs, err := expandKey(ctx, st, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, o := range objs {
			id := scheme + "/" + bucket + "/" + o.Key
			if !seen[id] {
				seen[id] = true
				out = append(out, prefetchFile{scheme: scheme, bucket: bucket, info: o})
			}
		}
	}
	return out, nil
}

// splitPath maps a path under mountPoint (or a scheme://bucket/key URL)
// to its scheme, bucket and key. Relative paths are taken from $PWD (or
// the working directory) without touching the file system.
func splitPath(mountPoint, p string) (scheme, bucket, key string, err error) {
	var rest string
	if s, r, ok := strings.Cut(p, "://"); ok {
		scheme, rest = s, r
	} else {
		if !filepath.IsAbs(p) {
			wd := os.Getenv("PWD")
			if !filepath.IsAbs(wd) {
				if wd, err = os.Getwd(); err != nil {
					return "", "", "", fmt.Errorf("%s: relative path: %w", p, err)
				}
			}
			p = filepath.Join(wd, p)
		}
		mp := filepath.Clean(mountPoint)
		r, ok := strings.CutPrefix(filepath.Clean(p), mp+"/")
		if !ok {
			return "", "", "", fmt.Errorf("%s is not under the mount point %s", p, mp)
		}
		scheme, rest, _ = strings.Cut(r, "/")
	}
	switch scheme {
	case "s3", "gs", "az":
	default:
		return "", "", "", fmt.Errorf("%s: unknown scheme %q (want s3, gs or az)", p, scheme)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" || hasMeta(bucket) {
		return "", "", "", fmt.Errorf("%s: name a bucket (without glob characters)", p)
	}
	return scheme, bucket, strings.TrimSuffix(key, "/"), nil
}

// hasMeta reports whether s has path.Match syntax.
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// expandKey lists the objects key names: the object itself, or every
// object under key/ when there is no such object (a directory; "" is the
// whole bucket), or with glob characters every object matching the
// pattern or under a directory matching it. Directory markers (keys
// ending in "/") are left out. None at all is an error wrapping
// objstore.ErrNotFound.
func expandKey(ctx context.Context, st objstore.Store, key string) ([]objstore.ObjectInfo, error) {
	if hasMeta(key) {
		return expandGlob(ctx, st, key)
	}
	if key != "" {
		info, err := st.Stat(ctx, key)
		if err == nil {
			return []objstore.ObjectInfo{info}, nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return nil, err
		}
	}
	prefix := key
	if prefix != "" {
		prefix += "/"
	}
	objs, _, err := objstore.ListAll(ctx, st, objstore.ListOptions{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	out := files(objs)
	if len(out) == 0 {
		return nil, fmt.Errorf("no such file or directory: %w", objstore.ErrNotFound)
	}
	return out, nil
}

// expandGlob lists the literal prefix of pattern and keeps the objects
// that match it, or that lie under a directory that matches it.
func expandGlob(ctx context.Context, st objstore.Store, pattern string) ([]objstore.ObjectInfo, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	prefix := pattern[:strings.IndexAny(pattern, `*?[\`)]
	objs, _, err := objstore.ListAll(ctx, st, objstore.ListOptions{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	var out []objstore.ObjectInfo
	for _, o := range files(objs) {
		if globMatch(pattern, o.Key) {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no match for %q: %w", pattern, objstore.ErrNotFound)
	}
	return out, nil
}

// globMatch reports whether pattern matches key or one of its parent
// directories.
func globMatch(pattern, key string) bool {
	for k := key; ; {
		if ok, _ := path.Match(pattern, k); ok {
			return true
		}
		i := strings.LastIndexByte(k, '/')
		if i < 0 {
			return false
		}
		k = k[:i]
	}
}

// files drops directory markers.
func files(objs []objstore.ObjectInfo) []objstore.ObjectInfo {
	out := objs[:0:0]
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/") {
			out = append(out, o)
		}
	}
	return out
}
