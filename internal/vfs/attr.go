package vfs

import (
	"context"
	"io"
	"maps"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"golang.org/x/sync/errgroup"
)

// Kind is what a name is (re-exported so callers need not import the cache).
type Kind = meta.Kind

// Kinds of names.
const (
	KindFile    = meta.KindFile
	KindDir     = meta.KindDir
	KindSymlink = meta.KindSymlink
	KindFifo    = meta.KindFifo
	KindSocket  = meta.KindSocket
	KindChar    = meta.KindChar
	KindBlock   = meta.KindBlock
)

// ModeType is the S_IFMT type bits of a name of kind k.
func ModeType(k Kind) uint32 {
	switch k {
	case KindDir:
		return syscall.S_IFDIR
	case KindSymlink:
		return syscall.S_IFLNK
	case KindFifo:
		return syscall.S_IFIFO
	case KindSocket:
		return syscall.S_IFSOCK
	case KindChar:
		return syscall.S_IFCHR
	case KindBlock:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// Attr is what stat shows of a name.
type Attr struct {
	Kind     meta.Kind
	Size     int64
	Mode     uint32 // permission bits (07777)
	Uid, Gid uint32
	Rdev     uint32 // devices
	Atime    time.Time
	Mtime    time.Time
	Ctime    time.Time
	// Unlinked: the file lost its name (an open descriptor's fstat after
	// unlink): st_nlink 0.
	Unlinked bool
	Symlink  string // target, for symlinks
	Version  string // object version ("" while dirty or for directories)
	// Volatile: the kernel writes the file beside ferry (write
	// passthrough) for an open descriptor, so these attributes may be
	// outdated at once: the kernel must not cache them (a second node of
	// the file, a reopen that could not pass through, would otherwise
	// show the size of before those writes).
	Volatile bool
}

// Getattr stats the path p.
func (fs *FS) Getattr(ctx context.Context, p string) (Attr, error) {
	l, err := Parse(p)
	if err != nil {
		return Attr{}, err
	}
	return fs.getattr(ctx, l)
}

func (fs *FS) getattr(ctx context.Context, l Loc) (Attr, error) {
	switch {
	case l.isRoot(), l.isScheme():
		return fs.dirAttrOf(ctx, l)
	case l.isBucket():
		if _, err := fs.store(ctx, l); err != nil {
			fs.logErr("lookup", l, err)
			return Attr{}, err
		}
		return fs.dirAttrOf(ctx, l)
	}
	if f := fs.deps.Writeback.Get(l.target()); f != nil {
		return fs.fileAttr(f), nil
	}
	if fs.deps.Writeback.PendingDelete(l.target()) {
		// The object at l was renamed away (deleted once the new name
		// is durable); a directory l may exist all the same.
		return fs.dirAttrOnly(ctx, l)
	}
	par, name := l.parent()
	if hiddenName(name) {
		return Attr{}, syscall.ENOENT // another tool's directory marker
	}
	if e, ok := fs.deps.Meta.Stat(l.cacheKey()); ok {
		switch e.Kind {
		case meta.KindNone:
			return Attr{}, syscall.ENOENT
		case meta.KindDir:
			return fs.dirAttrOf(ctx, l)
		}
		// The object was stat'ed; a listing since may show a directory
		// of its name, which wins.
		if ls, ok := fs.deps.Meta.List(par.cacheKey()); ok {
			if le, found := ls.Has(name); found && le.Kind == meta.KindDir {
				return fs.dirAttrOf(ctx, l)
			}
		}
		return fs.entryAttr(e.Kind, e.Info), nil
	}
	// Files staged below make l a directory (a directory shadows an
	// object of its name), without asking the store: it may be
	// unreachable, and the task must keep working on what it staged.
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.Key+"/") {
		return fs.dirAttrOf(ctx, l)
	}
	// The parent's cached listing answers for names it holds (and for
	// names it lacks), except objects that may be symlinks or special
	// files (maybeNode).
	// A directory with repeated lookup misses is listed once, so that a
	// stat of every name costs one paginated LIST, not a request per name.
	ls, ok := fs.deps.Meta.List(par.cacheKey())
	if !ok && fs.missedOften(par) {
		ls, ok = fs.tryListing(ctx, par)
	}
	if ok {
		e, found := ls.Has(name)
		if found && e.Kind == meta.KindFile && e.Info.Version == "" {
			// Created through the mount and uploaded since (it is not
			// dirty): the listing lacks what the bucket knows of it.
			// This mount's upload tells, else listing again answers the
			// names uploaded with it at once.
			if ce, ok := fs.completeCreated(par, ls, e); ok {
				e = ce
			} else if nls, ok := fs.relist(ctx, par, ls); ok {
				ls = nls
				e, found = ls.Has(name)
			}
		}
		switch {
		case !found && fs.isShadowed(par):
			// par is an object too: MinIO lists nothing below it, so
			// only the store tells whether the name is there.
			a, err := fs.remoteAttr(ctx, l)
			if err != nil {
				fs.logErr("lookup", l, err)
			}
			return a, err
		case !found:
			return Attr{}, syscall.ENOENT
		case e.Kind == meta.KindDir:
			return fs.dirAttrOf(ctx, l)
		}
		if a, ok := fs.listedAttr(ctx, l, e); ok {
			return a, nil
		}
		// Listed as an object (so no directory shadows it): one HEAD
		// tells its size, kind and attributes.
		return fs.statFile(ctx, l)
	}
	a, err := fs.remoteAttr(ctx, l)
	if err != nil {
		fs.logErr("lookup", l, err)
	}
	return a, err
}

// remoteAttr asks the store whether l is a directory (any key under l/)
// or an object, both at once, and for the directory's marker (its
// attributes). A directory shadows an object of the same name.
func (fs *FS) remoteAttr(ctx context.Context, l Loc) (Attr, error) {
	st, err := fs.store(ctx, l)
	if err != nil {
		return Attr{}, err
	}
	var (
		page    objstore.ListPage
		info    objstore.ObjectInfo
		statErr error
	)
	// Old names pending deletion, looked at before the listing (see
	// hiddenDir).
	before := fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, l.dirPrefix())
	since := time.Now() // for ghostPrefix
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		page, err = st.List(gctx, objstore.ListOptions{Prefix: l.Key + "/", Delimiter: "/", MaxKeys: 1})
		return err
	})
	g.Go(func() error {
		info, statErr = st.Stat(gctx, l.Key)
		if statErr != nil && !errIs(statErr, objstore.ErrNotFound) {
			return statErr
		}
		if statErr == nil {
			var err error
			info, err = fs.completeInfo(gctx, st, info)
			return err
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return Attr{}, err
	}
	ck := l.cacheKey()
	if len(page.Objects) == 0 && len(page.Prefixes) > 0 &&
		objstore.WrittenSince(st, strings.TrimSuffix(page.Prefixes[0], "/"), since) {
		// Only a prefix below l, of a key this mount wrote meanwhile:
		// it may be a ghost (see ghostPrefix). Keys tell.
		var err error
		if page, err = st.List(ctx, objstore.ListOptions{Prefix: l.Key + "/", MaxKeys: 1}); err != nil {
			return Attr{}, err
		}
	}
	if len(page.Objects) > 0 || len(page.Prefixes) > 0 {
		hidden, err := fs.hiddenDir(ctx, st, l, before)
		if err != nil {
			return Attr{}, err
		}
		if !hidden {
			if statErr == nil { // an object of its name too, hidden
				fs.noteShadowed(l, isDirObject(info))
			}
			fs.deps.Meta.PutStat(ck, meta.KindDir, objstore.ObjectInfo{})
			// The first key below l is its marker when it has one.
			if len(page.Objects) == 0 || page.Objects[0].Key != l.Key+"/" {
				fs.noMarker(l)
			}
			return fs.dirAttrOf(ctx, l)
		}
	}
	if statErr == nil {
		kind := kindOf(info)
		if kind == meta.KindDir {
			return fs.dirObjectAttr(ctx, l)
		}
		fs.putStat(l, kind, info)
		return fs.entryAttr(kind, info), nil
	}
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.Key+"/") {
		return fs.dirAttrOf(ctx, l) // only dirty files below: a directory being written
	}
	fs.deps.Meta.PutNegative(ck)
	return Attr{}, syscall.ENOENT
}

// maybeNode reports whether a listed object may be a symlink or a
// special file rather than a regular file, which only its metadata
// tells (a listing has none): an empty object, or one of the size of a
// symlink whose target is its body (writeback.SymlinkBodySize).
func maybeNode(info objstore.ObjectInfo) bool {
	return info.Size == 0 || info.Size == writeback.SymlinkBodySize
}

// kindOf tells the kind of an object from its metadata (and type: a
// directory object is a directory, layout.go).
func kindOf(info objstore.ObjectInfo) meta.Kind {
	if isDirObject(info) {
		return meta.KindDir
	}
	if _, ok := info.Metadata[SymlinkMeta]; ok {
		return meta.KindSymlink
	}
	if _, ok := info.Metadata[writeback.MetaSymlinkBody]; ok {
		return meta.KindSymlink
	}
	if info.Size == 0 {
		return kindOfMode(writeback.ParseAttrs(info.Metadata).Mode)
	}
	return meta.KindFile
}

// kindOfMode is the kind of a special file's mode type bits, else KindFile.
func kindOfMode(mode uint32) meta.Kind {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return meta.KindFifo
	case syscall.S_IFSOCK:
		return meta.KindSocket
	case syscall.S_IFCHR:
		return meta.KindChar
	case syscall.S_IFBLK:
		return meta.KindBlock
	}
	return meta.KindFile
}

// completeInfo reads the target of a symlink kept in the object's body
// into info's metadata (SymlinkMeta), so that what caches info has it.
func (fs *FS) completeInfo(ctx context.Context, st objstore.Store, info objstore.ObjectInfo) (objstore.ObjectInfo, error) {
	if _, ok := info.Metadata[writeback.MetaSymlinkBody]; !ok {
		return info, nil
	}
	if _, ok := info.Metadata[SymlinkMeta]; ok {
		return info, nil
	}
	rd, err := st.NewReader(ctx, info.Key, 0, writeback.SymlinkBodySize, objstore.ReadOptions{IfVersion: info.Version})
	if err != nil {
		return info, err
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, writeback.SymlinkBodySize))
	if err != nil {
		return info, err
	}
	md := maps.Clone(info.Metadata)
	md[SymlinkMeta] = writeback.ParseSymlinkBody(b)
	info.Metadata = md
	return info, nil
}

// entryAttr is the attributes of an object of the given kind (not a
// directory): those in its metadata, else ferry's defaults (mode 0644,
// the mount's owner, the object's modification time).
func (fs *FS) entryAttr(kind meta.Kind, info objstore.ObjectInfo) Attr {
	w := writeback.ParseAttrs(info.Metadata)
	a := Attr{Kind: kind, Size: info.Size, Mode: 0o644, Version: info.Version}
	switch kind {
	case meta.KindSymlink:
		a.Symlink = info.Metadata[SymlinkMeta]
		a.Size = int64(len(a.Symlink))
		a.Mode = 0o777
	case meta.KindChar, meta.KindBlock:
		a.Rdev = w.Rdev
	}
	if w.HasMode && kind != meta.KindSymlink {
		a.Mode = w.Mode & 0o7777
	}
	if w.Mtime.IsZero() {
		w.Mtime = info.ModTime
	}
	fs.applyOwnerTimes(&a, w)
	return a
}

// applyOwnerTimes sets a's owner and times from w, with the defaults of
// what w lacks: the mount's owner, the access and change time equal to
// the modification time.
func (fs *FS) applyOwnerTimes(a *Attr, w writeback.Attrs) {
	a.Uid, a.Gid = fs.opts.Uid, fs.opts.Gid
	if w.HasOwner {
		a.Uid, a.Gid = w.Uid, w.Gid
	}
	a.Mtime, a.Atime, a.Ctime = w.Mtime, w.Atime, w.Ctime
	if a.Atime.IsZero() {
		a.Atime = a.Mtime
	}
	if a.Ctime.IsZero() {
		a.Ctime = a.Mtime
	}
}

// fileAttr is the attributes of the dirty file f.
func (fs *FS) fileAttr(f *writeback.File) Attr {
	w := f.Attrs()
	var a Attr
	if t := f.Symlink(); t != "" {
		a = Attr{Kind: meta.KindSymlink, Size: int64(len(t)), Symlink: t, Mode: 0o777}
	} else {
		a = Attr{Kind: kindOfMode(w.Mode), Size: f.Size(), Mode: w.Mode & 0o7777, Rdev: w.Rdev}
	}
	fs.applyOwnerTimes(&a, w)
	a.Volatile = f.External()
	return a
}

// statFile stats l, known not to be a directory.
func (fs *FS) statFile(ctx context.Context, l Loc) (Attr, error) {
	st, err := fs.store(ctx, l)
	if err != nil {
		return Attr{}, err
	}
	info, err := st.Stat(ctx, l.Key)
	if errIs(err, objstore.ErrNotFound) {
		return fs.remoteAttr(ctx, l) // gone since it was listed: ask again
	}
	if err == nil {
		info, err = fs.completeInfo(ctx, st, info)
	}
	if err != nil {
		fs.logErr("lookup", l, err)
		return Attr{}, err
	}
	kind := kindOf(info)
	if kind == meta.KindDir {
		return fs.dirObjectAttr(ctx, l)
	}
	fs.putStat(l, kind, info)
	return fs.entryAttr(kind, info), nil
}

// dirObjectAttr is the attributes of the directory l whose object is a
// directory object (a HEAD showed it).
func (fs *FS) dirObjectAttr(ctx context.Context, l Loc) (Attr, error) {
	fs.noteShadowed(l, true)
	fs.deps.Meta.PutStat(l.cacheKey(), meta.KindDir, objstore.ObjectInfo{})
	// A listing without metadata (S3) showed it as a file: readdir shows
	// a directory from now on.
	par, name := l.parent()
	if ls, ok := fs.deps.Meta.List(par.cacheKey()); ok {
		if e, found := ls.Has(name); found && e.Kind != meta.KindDir {
			ls.Add(meta.DirEntry{Name: name, Kind: meta.KindDir})
		}
	}
	return fs.dirAttrOf(ctx, l)
}

// missedOften counts lookups in a directory that has no cached listing and
// reports when the directory should be listed instead (from the fourth
// lookup within a minute).
func (fs *FS) missedOften(dir Loc) bool {
	if dir.Key == "" && dir.Bucket == "" {
		return false
	}
	k := dir.cacheKey()
	now := time.Now()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	m := fs.misses[k]
	if now.Sub(m.since) > time.Minute {
		m = missCount{since: now}
	}
	m.n++
	fs.misses[k] = m
	if len(fs.misses) > 4096 {
		clear(fs.misses) // bound the map; counts restart
	}
	return m.n > 3
}

// tryListing lists dir for lookups (at most lookupMaxPages pages); a
// failure, or a directory too big, only means the lookup asks the store
// directly.
func (fs *FS) tryListing(ctx context.Context, dir Loc) (*meta.Listing, bool) {
	if fs.deps.Meta.TooBig(dir.cacheKey()) {
		return nil, false
	}
	ls, err := fs.listDir(ctx, dir, lookupMaxPages, nil)
	return ls, err == nil
}

// relistAfter is the age from which a listing holding names created
// through the mount and uploaded since is listed again for a lookup of
// one of them; a younger one leaves the lookup to one HEAD, so that
// lookups during a long upload do not list the directory over and over.
// A variable for tests.
var relistAfter = 2 * time.Second

// relist lists dir again for lookups when old, its cached listing, is
// older than relistAfter (or gone). Concurrent lookups share one listing.
func (fs *FS) relist(ctx context.Context, dir Loc, old *meta.Listing) (*meta.Listing, bool) {
	if time.Since(old.Loaded) < relistAfter || fs.deps.Meta.TooBig(dir.cacheKey()) {
		return nil, false
	}
	ls, err := fs.listDir(ctx, dir, lookupMaxPages, func(ls *meta.Listing) bool { return ls != old })
	return ls, err == nil
}

// dirAttrOnly stats l as a directory only (the object named l does not
// count): staged files below, a cached directory entry, or keys below l
// in the bucket other than old names pending deletion.
func (fs *FS) dirAttrOnly(ctx context.Context, l Loc) (Attr, error) {
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.Key+"/") {
		return fs.dirAttrOf(ctx, l)
	}
	if e, ok := fs.deps.Meta.Stat(l.cacheKey()); ok && e.Kind == meta.KindDir {
		return fs.dirAttrOf(ctx, l)
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return Attr{}, err
	}
	live, err := fs.liveUnder(ctx, st, l, false, nil)
	if err != nil {
		fs.logErr("lookup", l, err)
		return Attr{}, err
	}
	if !live {
		return Attr{}, syscall.ENOENT
	}
	fs.deps.Meta.PutStat(l.cacheKey(), meta.KindDir, objstore.ObjectInfo{})
	return fs.dirAttrOf(ctx, l)
}
