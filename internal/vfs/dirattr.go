package vfs

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Directory attributes. A directory's mode, owner and times are kept as
// the metadata of its marker object "dir/" (writeback.Attrs keys), written
// by mkdir and by chmod, chown and utimens of the directory; a directory
// without a marker (a common prefix only) shows the defaults: 0755, the
// mount's owner, the time the mount started. The modification and change
// times that creating or removing an entry sets are kept in memory only
// (FS.dirs), for the mount's life: persisting them would rewrite the
// marker at every create.

// dirState is what the mount knows of a directory beyond its marker.
type dirState struct {
	// attr is the directory's attributes as of the last mkdir or setattr
	// through this mount, when full.
	attr Attr
	full bool
	// mtime and ctime: the last time an entry was created or removed.
	mtime, ctime time.Time
}

// maxDirStates bounds FS.dirs; when it is full, it is cleared (what is
// lost: the in-memory times of entry changes; markers keep the rest).
const maxDirStates = 100000

// markerKey is the stat-cache key of l's marker object: its info
// (KindFile), or KindNone when the directory has none.
func markerKey(l Loc) string { return l.cacheKey() + "/" }

// defaultDirAttr is the attributes of a directory without a marker.
func (fs *FS) defaultDirAttr() Attr {
	return Attr{Kind: meta.KindDir, Mode: 0o755, Uid: fs.opts.Uid, Gid: fs.opts.Gid, Atime: fs.start, Mtime: fs.start, Ctime: fs.start}
}

// dirAttrOf returns the attributes of the directory l (known to exist):
// what this mount set, else its marker's metadata (one HEAD, cached),
// else the defaults; with the times of entry changes in this mount. A
// failed HEAD gives the defaults (logged), not an error: the directory
// exists, and its staged files must stay usable in an outage; but with
// Options.ExactAttrs (the kernel enforces modes) it is EIO, and a lookup
// interrupted while it waits for the HEAD fails (EINTR): defaults there
// would open a 0700 directory to others until the attributes expire.
func (fs *FS) dirAttrOf(ctx context.Context, l Loc) (Attr, error) {
	fs.dmu.Lock()
	d, ok := fs.dirs[l.cacheKey()]
	var ds dirState
	if ok {
		ds = *d
	}
	fs.dmu.Unlock()
	var a Attr
	switch {
	case ds.full:
		a = ds.attr
	case l.Key == "":
		a = fs.defaultDirAttr()
	default:
		var err error
		if a, err = fs.markerAttr(ctx, l); err != nil {
			return Attr{}, err
		}
	}
	if ds.mtime.After(a.Mtime) {
		a.Mtime = ds.mtime
	}
	if ds.ctime.After(a.Ctime) {
		a.Ctime = ds.ctime
	}
	return a, nil
}

// markerAttr returns the attributes kept on l's marker.
func (fs *FS) markerAttr(ctx context.Context, l Loc) (Attr, error) {
	e, ok := fs.deps.Meta.Stat(markerKey(l))
	if !ok {
		st, err := fs.store(ctx, l)
		if err != nil {
			return fs.markerFailed(ctx)
		}
		if e = fs.loadMarker(ctx, st, l); e == nil {
			return fs.markerFailed(ctx)
		}
	}
	if e.Kind == meta.KindNone {
		return fs.defaultDirAttr(), nil
	}
	return fs.markerInfoAttr(e.Info), nil
}

// markerFailed is what markerAttr answers when the marker could not be
// read (see dirAttrOf).
func (fs *FS) markerFailed(ctx context.Context) (Attr, error) {
	switch {
	case ctx.Err() != nil:
		return Attr{}, ctx.Err()
	case fs.opts.ExactAttrs:
		return Attr{}, syscall.EIO
	}
	return fs.defaultDirAttr(), nil
}

// noMarker records that the directory l has no marker (a listing
// showed it), unless one is cached.
func (fs *FS) noMarker(l Loc) {
	if _, ok := fs.deps.Meta.Stat(markerKey(l)); !ok {
		fs.deps.Meta.PutStatWait(markerKey(l), meta.KindNone, objstore.ObjectInfo{})
	}
}

// markersAheadMax bounds the markers fetched ahead for one listing.
const markersAheadMax = 64

// markersAhead fetches in the background the markers of the first
// subdirectories of the listing ents of l whose marker is not cached:
// a walker (ls -l, find) looks them up next, and each lookup of a
// directory needs its marker's attributes (a HEAD). A listing of
// l's subdirectory tells whether it has one, without a HEAD.
func (fs *FS) markersAhead(st objstore.Store, l Loc, ents []meta.DirEntry) {
	n := 0
	for _, e := range ents {
		if e.Kind != meta.KindDir {
			continue
		}
		c := l.child(e.Name)
		if _, ok := fs.deps.Meta.Stat(markerKey(c)); ok {
			continue
		}
		if n++; n > markersAheadMax {
			return
		}
		fs.ahead.startKey(markerKey(c), fs.ahead.msem, func(ctx context.Context) {
			fs.loadMarker(ctx, st, c)
		})
	}
}

// markerInfoAttr is the attributes of a directory whose marker is info.
func (fs *FS) markerInfoAttr(info objstore.ObjectInfo) Attr {
	w := writeback.ParseAttrs(info.Metadata)
	a := Attr{Kind: meta.KindDir, Mode: 0o755}
	if w.HasMode {
		a.Mode = w.Mode & 0o7777
	}
	if w.Mtime.IsZero() {
		w.Mtime = info.ModTime
	}
	fs.applyOwnerTimes(&a, w)
	return a
}

// loadMarker stats l's marker and caches the answer; nil when the store
// failed (logged). Concurrent calls for one marker share one HEAD.
func (fs *FS) loadMarker(ctx context.Context, st objstore.Store, l Loc) *meta.Entry {
	k := markerKey(l)
	for {
		fs.dmu.Lock()
		ch, busy := fs.mflight[k]
		if !busy {
			ch = make(chan struct{})
			fs.mflight[k] = ch
		}
		fs.dmu.Unlock()
		if !busy {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
		if e, ok := fs.deps.Meta.Stat(k); ok {
			return e
		}
	}
	defer func() {
		fs.dmu.Lock()
		close(fs.mflight[k])
		delete(fs.mflight, k)
		fs.dmu.Unlock()
	}()
	if e, ok := fs.deps.Meta.Stat(k); ok {
		return e
	}
	info, err := st.Stat(ctx, l.Key+"/")
	switch {
	case errIs(err, objstore.ErrNotFound):
		fs.deps.Meta.PutStatWait(markerKey(l), meta.KindNone, objstore.ObjectInfo{})
		return &meta.Entry{Kind: meta.KindNone}
	case err != nil:
		if ctx.Err() == nil {
			fs.log.Warn("lookup of a directory's attributes failed; it shows the defaults",
				"path", l.URL(), "err", err.Error())
		}
		return nil
	}
	fs.deps.Meta.PutStatWait(markerKey(l), meta.KindFile, info)
	return &meta.Entry{Kind: meta.KindFile, Info: info}
}

// setDirAttr records a, the full attributes of the directory l as this
// mount wrote them (mkdir, setattr).
func (fs *FS) setDirAttr(l Loc, a Attr) {
	fs.dmu.Lock()
	defer fs.dmu.Unlock()
	d := fs.dirStateLocked(l)
	d.attr, d.full = a, true
	d.mtime, d.ctime = time.Time{}, time.Time{} // a has them
}

// noteDirChanged sets the modification and change times of the directory
// l (an entry was created or removed in it) to now.
func (fs *FS) noteDirChanged(l Loc) {
	now := time.Now()
	fs.dmu.Lock()
	defer fs.dmu.Unlock()
	d := fs.dirStateLocked(l)
	d.mtime, d.ctime = now, now
}

// touchDirCtime sets the change time of the directory l to now (it was
// renamed).
func (fs *FS) touchDirCtime(l Loc) {
	now := time.Now()
	fs.dmu.Lock()
	defer fs.dmu.Unlock()
	fs.dirStateLocked(l).ctime = now
}

// dirStateLocked returns l's state, made if needed. Caller holds dmu.
func (fs *FS) dirStateLocked(l Loc) *dirState {
	k := l.cacheKey()
	d := fs.dirs[k]
	if d == nil {
		if len(fs.dirs) >= maxDirStates {
			clear(fs.dirs)
		}
		d = &dirState{}
		fs.dirs[k] = d
	}
	return d
}

// forgetDirs drops the state of the directory l and of every one below
// it (rmdir), and their cached markers.
func (fs *FS) forgetDirs(l Loc) {
	k := l.cacheKey()
	fs.dmu.Lock()
	for dk := range fs.dirs {
		if dk == k || strings.HasPrefix(dk, k+"/") {
			delete(fs.dirs, dk)
		}
	}
	fs.dmu.Unlock()
	fs.deps.Meta.Forget(markerKey(l))
}

// moveDirs moves the state of the directory src, and of every one below
// it, to dst (a directory rename); the renamed directory's change time
// is now.
func (fs *FS) moveDirs(src, dst Loc) {
	sk, dk := src.cacheKey(), dst.cacheKey()
	fs.dmu.Lock()
	moved := map[string]*dirState{}
	for k, d := range fs.dirs {
		if rest, ok := strings.CutPrefix(k, sk); ok && (rest == "" || rest[0] == '/') {
			delete(fs.dirs, k)
			moved[dk+rest] = d
		}
	}
	for k := range fs.dirs {
		if k == dk || strings.HasPrefix(k, dk+"/") {
			delete(fs.dirs, k) // replaced
		}
	}
	for k, d := range moved {
		fs.dirs[k] = d
	}
	fs.dmu.Unlock()
	fs.touchDirCtime(dst)
}

// markerMetadata is the metadata of a directory marker for a.
func markerMetadata(a Attr) map[string]string {
	md := map[string]string{}
	writeback.Attrs{
		Mode: a.Mode & 0o7777, HasMode: true, Uid: a.Uid, Gid: a.Gid, HasOwner: true,
		Mtime: a.Mtime, Atime: a.Atime, Ctime: a.Ctime,
	}.Encode(md)
	return md
}

// setattrDir applies s to the directory l: the new attributes are
// written to its marker (a bucket's root has none: they are kept in
// memory).
func (fs *FS) setattrDir(ctx context.Context, l Loc, s SetAttr) (Attr, error) {
	if s.Size != nil {
		return Attr{}, syscall.EISDIR
	}
	a, err := fs.dirAttrOf(ctx, l)
	if err != nil {
		return Attr{}, err
	}
	s.apply(&a, time.Now())
	if l.Key != "" {
		st, err := fs.store(ctx, l)
		if err != nil {
			return Attr{}, err
		}
		if err := fs.clearPending(ctx, st, l); err != nil {
			return Attr{}, err
		}
		info, err := st.Put(ctx, l.Key+"/", emptyReader{}, 0, objstore.PutOptions{Metadata: markerMetadata(a)})
		if err != nil {
			fs.logErr("setattr", l, err)
			return Attr{}, nameRefused(err)
		}
		fs.deps.Meta.PutStatWait(markerKey(l), meta.KindFile, info)
	}
	fs.setDirAttr(l, a)
	return a, nil
}

// nameRefused turns the store's refusal of a marker's key as a name
// (MinIO stores "dir/" as the name plus a 9-byte suffix, so a directory
// name over 246 bytes is refused there) into ENAMETOOLONG; the caller
// logged err.
func nameRefused(err error) error {
	var oe *objstore.Error
	if errAs(err, &oe) && oe.Status == 400 && (strings.Contains(oe.Code, "ObjectName") || strings.Contains(oe.Code, "KeyTooLong")) {
		return syscall.ENAMETOOLONG
	}
	return err
}
