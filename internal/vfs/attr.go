package vfs

import (
	"context"
	"strconv"
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
)

// Attr is what stat shows of a name.
type Attr struct {
	Kind    meta.Kind
	Size    int64
	Mtime   time.Time
	Mode    uint32 // permission bits
	Symlink string // target, for symlinks
	Version string // object version ("" while dirty or for directories)
}

var dirAttr = Attr{Kind: meta.KindDir, Mode: 0o755}

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
		return dirAttr, nil
	case l.isBucket():
		if _, err := fs.store(ctx, l); err != nil {
			fs.logErr("lookup", l, err)
			return Attr{}, err
		}
		return dirAttr, nil
	}
	if f := fs.deps.Writeback.Get(l.target()); f != nil {
		return fileAttr(f), nil
	}
	if fs.deps.Writeback.PendingDelete(l.target()) {
		// The object at l was renamed away (deleted once the new name
		// is durable); a directory l may exist all the same.
		return fs.dirAttrOnly(ctx, l)
	}
	if e, ok := fs.deps.Meta.Stat(l.cacheKey()); ok {
		if e.Kind == meta.KindNone {
			return Attr{}, syscall.ENOENT
		}
		return entryAttr(e.Kind, e.Info), nil
	}
	// Files staged below make l a directory (a directory shadows an
	// object of its name), without asking the store: it may be
	// unreachable, and the task must keep working on what it staged.
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.Key+"/") {
		return dirAttr, nil
	}
	// The parent's cached listing answers for names it holds (and for
	// names it lacks), except zero-size objects, which may be symlinks.
	// A directory with repeated lookup misses is listed once, so that a
	// stat of every name costs one paginated LIST, not a request per name.
	par, name := l.parent()
	ls, ok := fs.deps.Meta.List(par.cacheKey())
	if !ok && fs.missedOften(par) {
		ls, ok = fs.tryListing(ctx, par)
	}
	if ok {
		e, found := ls.Has(name)
		if found && e.Kind == meta.KindFile && e.Info.Version == "" {
			// Created through the mount and uploaded since (it is not
			// dirty): the listing lacks what the bucket knows of it.
			// Listing again answers the names uploaded with it at once.
			if nls, ok := fs.relist(ctx, par, ls); ok {
				ls = nls
				e, found = ls.Has(name)
			}
		}
		switch {
		case !found:
			return Attr{}, syscall.ENOENT
		case found && e.Kind == meta.KindDir:
			return dirAttr, nil
		case found && e.Kind == meta.KindFile && e.Info.Size > 0 && e.Info.Version != "":
			return entryAttr(meta.KindFile, e.Info), nil
		case found && e.Kind != meta.KindDir:
			// Listed as a file (so no directory shadows it): one HEAD
			// tells its size and whether it is a symlink.
			return fs.statFile(ctx, l)
		}
	}
	a, err := fs.remoteAttr(ctx, l)
	if err != nil {
		fs.logErr("lookup", l, err)
	}
	return a, err
}

// remoteAttr asks the store whether l is a directory (any key under l/)
// or an object, both at once. A directory shadows an object of the same name.
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
		return nil
	})
	if err := g.Wait(); err != nil {
		return Attr{}, err
	}
	ck := l.cacheKey()
	if len(page.Objects) > 0 || len(page.Prefixes) > 0 {
		hidden, err := fs.hiddenDir(ctx, st, l, before)
		if err != nil {
			return Attr{}, err
		}
		if !hidden {
			fs.deps.Meta.PutStat(ck, meta.KindDir, objstore.ObjectInfo{})
			return dirAttr, nil
		}
	}
	if statErr == nil {
		kind := kindOf(info)
		fs.deps.Meta.PutStat(ck, kind, info)
		return entryAttr(kind, info), nil
	}
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.Key+"/") {
		return dirAttr, nil // only dirty files below: a directory being written
	}
	fs.deps.Meta.PutNegative(ck)
	return Attr{}, syscall.ENOENT
}

func kindOf(info objstore.ObjectInfo) meta.Kind {
	if _, ok := info.Metadata[SymlinkMeta]; ok {
		return meta.KindSymlink
	}
	return meta.KindFile
}

func entryAttr(kind meta.Kind, info objstore.ObjectInfo) Attr {
	switch kind {
	case meta.KindDir:
		return dirAttr
	case meta.KindSymlink:
		t := info.Metadata[SymlinkMeta]
		return Attr{Kind: meta.KindSymlink, Size: int64(len(t)), Symlink: t, Mtime: info.ModTime, Mode: 0o777, Version: info.Version}
	}
	a := Attr{Kind: meta.KindFile, Size: info.Size, Mtime: info.ModTime, Mode: 0o644, Version: info.Version}
	if m, err := strconv.ParseUint(info.Metadata[ModeMeta], 8, 32); err == nil {
		a.Mode = uint32(m) & 0o7777
	}
	if ns, err := strconv.ParseInt(info.Metadata[MtimeMeta], 10, 64); err == nil {
		a.Mtime = time.Unix(0, ns)
	}
	return a
}

func fileAttr(f *writeback.File) Attr {
	if t := f.Symlink(); t != "" {
		return Attr{Kind: meta.KindSymlink, Size: int64(len(t)), Symlink: t, Mtime: f.ModTime(), Mode: 0o777}
	}
	mode := f.Mode() & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	return Attr{Kind: meta.KindFile, Size: f.Size(), Mtime: f.ModTime(), Mode: mode}
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
	if err != nil {
		fs.logErr("lookup", l, err)
		return Attr{}, err
	}
	kind := kindOf(info)
	fs.deps.Meta.PutStat(l.cacheKey(), kind, info)
	return entryAttr(kind, info), nil
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
		return dirAttr, nil
	}
	if e, ok := fs.deps.Meta.Stat(l.cacheKey()); ok && e.Kind == meta.KindDir {
		return dirAttr, nil
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
	return dirAttr, nil
}
