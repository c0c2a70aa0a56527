package vfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Schemes are the top-level directories of the mount.
var Schemes = []string{"s3", "gs", "az"}

// SymlinkMeta is the user-metadata key that holds a symlink's target.
const SymlinkMeta = "ferry-symlink"

// Metadata keys for POSIX attributes kept on objects.
const (
	ModeMeta  = "ferry-mode"
	MtimeMeta = "ferry-mtime"
)

// Resolver returns the store of one bucket (created lazily, cached by the
// caller, already wrapped in the retry decorator).
type Resolver func(ctx context.Context, scheme, bucket string) (objstore.Store, error)

// Deps are the collaborators of an FS.
type Deps struct {
	Resolve   Resolver
	Writeback *writeback.Manager
	Blocks    *block.Cache
	Meta      *meta.Cache
	Logger    *slog.Logger
}

// Options tune an FS.
type Options struct {
	// Uid and Gid own what has no owner of its own (bucket roots, objects
	// written by other tools); both zero: the process's user and group.
	Uid, Gid uint32
	// BucketTTL is how long a bucket's existence is trusted.
	BucketTTL time.Duration
	// ExactAttrs: every object's attributes are its own, never ferry's
	// defaults: a lookup that a listing without metadata (S3) answers
	// stats the object (a HEAD) unless its metadata is known. Set it when
	// the kernel enforces permissions (allow_other, default_permissions).
	ExactAttrs bool
	// DirReadahead: fetch the files a process is about to open, when it
	// reads the files of a directory one after the other
	// (fileahead.go).
	DirReadahead bool
}

// FS is the file system. All methods are safe for concurrent use.
type FS struct {
	opts Options
	deps Deps
	log  *slog.Logger

	mu      sync.Mutex             // guards buckets, seen, misses, odd, shadowed and dirObjs; a leaf lock
	buckets map[string]bucketState // "s3/b" -> existence; guarded by mu
	seen    map[string]string      // "s3/b/k" -> last version opened; guarded by mu
	misses  map[string]missCount   // dir -> lookups without a listing; guarded by mu
	odd     map[string]struct{}    // keys skipped by listings, logged once; guarded by mu
	// shadowed: directories that are objects too; dirObjs: those whose
	// object is a directory object (layout.go). Guarded by mu.
	shadowed map[string]struct{}
	dirObjs  map[string]struct{}

	// hmu guards open: the open handles by the name of their file
	// (Loc.cacheKey), see handles.go. Lock order: hmu, then Handle.mu.
	hmu  sync.Mutex
	open map[string]map[*Handle]struct{}

	ahead  *dirAhead  // background listings of a directory walk (dirahead.go)
	fahead *fileAhead // directory readahead of files (fileahead.go)

	start time.Time // the mount's start: the times of directories without any

	// dmu guards dirs, directory attributes this mount knows beyond the
	// markers, and mflight, the marker HEADs in flight (dirattr.go). A
	// leaf lock.
	dmu     sync.Mutex
	dirs    map[string]*dirState
	mflight map[string]chan struct{}

	// kmu guards known: the ferry metadata of objects seen by a HEAD, by
	// cache key (known.go). A leaf lock.
	kmu   sync.Mutex
	known map[string]knownMeta
}

type missCount struct {
	n     int
	since time.Time
}

type bucketState struct {
	err     error
	expires time.Time
}

// New returns an FS over deps.
func New(opts Options, deps Deps) *FS {
	if opts.BucketTTL == 0 {
		opts.BucketTTL = time.Minute
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if opts.Uid == 0 && opts.Gid == 0 {
		opts.Uid, opts.Gid = uint32(os.Getuid()), uint32(os.Getgid())
	}
	return &FS{opts: opts, deps: deps, log: deps.Logger, buckets: map[string]bucketState{}, seen: map[string]string{}, misses: map[string]missCount{}, odd: map[string]struct{}{}, open: map[string]map[*Handle]struct{}{}, ahead: newDirAhead(), fahead: newFileAhead(opts.DirReadahead, deps.Blocks),
		shadowed: map[string]struct{}{}, dirObjs: map[string]struct{}{},
		start: time.Now(), dirs: map[string]*dirState{}, mflight: map[string]chan struct{}{}, known: map[string]knownMeta{}}
}

// Loc is a parsed path: Scheme == "" is the root, Bucket == "" a scheme
// directory, Key == "" a bucket root.
type Loc struct {
	Scheme, Bucket, Key string
}

// Parse splits a mount-relative path ("s3/bucket/a/b").
func Parse(p string) (Loc, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return Loc{}, nil
	}
	parts := strings.SplitN(p, "/", 3)
	if !validScheme(parts[0]) {
		return Loc{}, syscall.ENOENT
	}
	l := Loc{Scheme: parts[0]}
	if len(parts) > 1 {
		l.Bucket = parts[1]
	}
	if len(parts) > 2 {
		l.Key = parts[2]
	}
	if err := checkNames(l); err != nil {
		return Loc{}, err
	}
	return l, nil
}

// Name limits: a path component (NAME_MAX) and a whole key (S3's limit).
const (
	NameMax = 255
	KeyMax  = 1024
)

// plausibleBucket reports whether name could be a bucket or container on
// some backend: 3 to 255 of [A-Za-z0-9._-], beginning and ending with a
// letter or digit (the union of S3's rules, legacy names included, GCS's
// and Azure's). Other names answer ENOENT without a
// request: a relative symlink that climbs out of its bucket looks up such
// names ("a", "..."), which the stores refuse with errors that are not
// "no such bucket" (S3: 400 InvalidBucketName).
func plausibleBucket(name string) bool {
	if len(name) < 3 || len(name) > NameMax || !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// checkNames rejects what cannot be a path below a bucket, so that a path
// never names another bucket or a key outside its own: NUL, empty, "." or
// ".." components are EINVAL (the kernel resolves "." and ".." before
// ferry sees them, so only a caller bypassing it sends them); a component
// over NameMax bytes or a key over KeyMax bytes is ENAMETOOLONG. Keys are
// UTF-8 on every backend (S3, GCS and Azure refuse other bytes, which
// would leave a file staged that can never be uploaded), so a name that
// is not is EILSEQ.
func checkNames(l Loc) error {
	if strings.IndexByte(l.Bucket, 0) >= 0 || strings.IndexByte(l.Key, 0) >= 0 {
		return syscall.EINVAL
	}
	if !utf8.ValidString(l.Bucket) || !utf8.ValidString(l.Key) {
		return syscall.EILSEQ
	}
	if l.Bucket == "." || l.Bucket == ".." || len(l.Bucket) > NameMax {
		return syscall.EINVAL
	}
	if l.Bucket != "" && !plausibleBucket(l.Bucket) {
		return syscall.ENOENT
	}
	if l.Key == "" {
		return nil
	}
	if len(l.Key) > KeyMax {
		return syscall.ENAMETOOLONG
	}
	for seg := range strings.SplitSeq(l.Key, "/") {
		switch {
		case seg == "", seg == ".", seg == "..":
			return syscall.EINVAL
		case len(seg) > NameMax:
			return syscall.ENAMETOOLONG
		}
	}
	return nil
}

func validScheme(s string) bool {
	for _, x := range Schemes {
		if x == s {
			return true
		}
	}
	return false
}

// String renders the location as a mount-relative path.
func (l Loc) String() string {
	return strings.Trim(path.Join(l.Scheme, l.Bucket, l.Key), "/")
}

// URL renders the location as s3://bucket/key.
func (l Loc) URL() string { return l.Scheme + "://" + l.Bucket + "/" + l.Key }

func (l Loc) isRoot() bool   { return l.Scheme == "" }
func (l Loc) isScheme() bool { return l.Scheme != "" && l.Bucket == "" }
func (l Loc) isBucket() bool { return l.Bucket != "" && l.Key == "" }
func (l Loc) target() writeback.Target {
	return writeback.Target{Scheme: l.Scheme, Bucket: l.Bucket, Key: l.Key}
}
func (l Loc) cacheKey() string { return l.Scheme + "/" + l.Bucket + "/" + l.Key }

// dirPrefix is the key prefix of the directory at l ("" for a bucket root).
func (l Loc) dirPrefix() string {
	if l.Key == "" {
		return ""
	}
	return l.Key + "/"
}

// parent returns the directory holding l, and l's base name.
func (l Loc) parent() (Loc, string) {
	i := strings.LastIndexByte(l.Key, '/')
	if i < 0 {
		return Loc{Scheme: l.Scheme, Bucket: l.Bucket}, l.Key
	}
	return Loc{Scheme: l.Scheme, Bucket: l.Bucket, Key: l.Key[:i]}, l.Key[i+1:]
}

func (l Loc) child(name string) Loc {
	switch {
	case l.isRoot():
		return Loc{Scheme: name}
	case l.isScheme():
		return Loc{Scheme: l.Scheme, Bucket: name}
	case l.Key == "":
		return Loc{Scheme: l.Scheme, Bucket: l.Bucket, Key: name}
	}
	return Loc{Scheme: l.Scheme, Bucket: l.Bucket, Key: l.Key + "/" + name}
}

// store resolves the bucket of l and checks that it exists.
func (fs *FS) store(ctx context.Context, l Loc) (objstore.Store, error) {
	st, err := fs.deps.Resolve(ctx, l.Scheme, l.Bucket)
	if err != nil {
		return nil, err
	}
	id := l.Scheme + "/" + l.Bucket
	fs.mu.Lock()
	b, ok := fs.buckets[id]
	fs.mu.Unlock()
	if ok && time.Now().Before(b.expires) {
		return st, b.err
	}
	_, err = st.List(ctx, objstore.ListOptions{MaxKeys: 1, Delimiter: "/"})
	if err != nil && !isFinal(err) {
		if ok && b.err == nil {
			// Known to exist: an unreachable store does not make the
			// bucket vanish (its staged files stay usable).
			return st, nil
		}
		return nil, err // transient: don't remember
	}
	fs.mu.Lock()
	fs.buckets[id] = bucketState{err: err, expires: time.Now().Add(fs.opts.BucketTTL)}
	fs.mu.Unlock()
	return st, err
}

func isFinal(err error) bool {
	return errIs(err, objstore.ErrNotFound) || errIs(err, objstore.ErrPermission)
}

// KnownBuckets lists the buckets of a scheme resolved so far.
func (fs *FS) knownBuckets(scheme string) []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for id, b := range fs.buckets {
		if b.err == nil && strings.HasPrefix(id, scheme+"/") {
			out = append(out, strings.TrimPrefix(id, scheme+"/"))
		}
	}
	return out
}

// logErr logs a backend failure once, with the path and the request id.
func (fs *FS) logErr(op string, l Loc, err error) {
	if err == nil || errIs(err, objstore.ErrNotFound) || isErrno(err) || errIs(err, context.Canceled) {
		return
	}
	attrs := []any{"op", op, "path", l.URL(), "err", err.Error()}
	var oe *objstore.Error
	if errAs(err, &oe) {
		attrs = append(attrs, "status", oe.Status, "request_id", oe.RequestID)
	}
	fs.log.Error(fmt.Sprintf("%s %s failed", op, l.URL()), attrs...)
}

// maxOddLogged bounds the keys remembered as logged by logOdd.
const maxOddLogged = 10000

// logOdd logs, once per key, a key of the bucket of l that a listing
// skips because no path can name it (an empty, "." or ".." component, a
// component longer than NameMax).
func (fs *FS) logOdd(l Loc, key string) {
	id := l.Scheme + "/" + l.Bucket + "/" + key
	fs.mu.Lock()
	_, seen := fs.odd[id]
	if !seen && len(fs.odd) < maxOddLogged {
		fs.odd[id] = struct{}{}
	}
	fs.mu.Unlock()
	if !seen {
		fs.log.Warn("listing skips a key that cannot be a path", "op", "readdir", "path", l.URL(), "key", key,
			"cause", "empty, \".\" or \"..\" component, a component over 255 bytes, or bytes that are not UTF-8")
	}
}
