package vfs

import (
	"context"
	"strings"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Attributes and listings. A lookup answered by a cached listing needs
// no request; but where listings carry no user metadata (S3), they lack
// the attributes ferry keeps there (mode, owner, times, the kind of a
// symlink or special file). Objects that may not be regular files (empty
// ones, and those of a symlink body's size) are always stat'ed. For the
// others, the metadata is known when this mount uploaded that version
// (writeback.Manager.Uploaded) or saw it in a HEAD (FS.known); else the
// listing answers with ferry's defaults (mode 0644, the mount's owner,
// the listed modification time), unless Options.ExactAttrs asks for a
// HEAD.

// maxKnown bounds FS.known (cleared when full).
const maxKnown = 100000

// knownMeta is an object's ferry metadata as a HEAD returned it.
type knownMeta struct {
	version string
	md      map[string]string
}

// putStat caches the stat of the object l (info from a HEAD), and
// remembers its ferry metadata for listings.
func (fs *FS) putStat(l Loc, kind meta.Kind, info objstore.ObjectInfo) {
	fs.deps.Meta.PutStat(l.cacheKey(), kind, info)
	if !hasFerryMeta(info.Metadata) || info.Version == "" {
		return
	}
	fs.kmu.Lock()
	defer fs.kmu.Unlock()
	if len(fs.known) >= maxKnown {
		clear(fs.known)
	}
	fs.known[l.cacheKey()] = knownMeta{version: info.Version, md: info.Metadata}
}

// forgetKnown drops what is known of l's metadata (it changed or went).
func (fs *FS) forgetKnown(l Loc) {
	fs.kmu.Lock()
	delete(fs.known, l.cacheKey())
	fs.kmu.Unlock()
}

// knownMetadata returns the metadata of version of the object l, when
// this mount uploaded or stat'ed it.
func (fs *FS) knownMetadata(l Loc, version string) (map[string]string, bool) {
	if md, ok := fs.deps.Writeback.Uploaded(l.target(), version); ok {
		return md, true
	}
	fs.kmu.Lock()
	defer fs.kmu.Unlock()
	k, ok := fs.known[l.cacheKey()]
	if !ok || k.version != version {
		return nil, false
	}
	return k.md, true
}

func hasFerryMeta(md map[string]string) bool {
	for k := range md {
		if strings.HasPrefix(k, "ferry-") {
			return true
		}
	}
	return false
}

// listsMetadata reports whether the listings of l's bucket carry user
// metadata.
func (fs *FS) listsMetadata(ctx context.Context, l Loc) bool {
	st, err := fs.deps.Resolve(ctx, l.Scheme, l.Bucket)
	return err == nil && st.Caps().ListMetadata
}

// listedAttr returns the attributes of l from its entry e in a cached
// listing, when the listing tells them (see above); ok is false when
// only a HEAD does.
func (fs *FS) listedAttr(ctx context.Context, l Loc, e meta.DirEntry) (Attr, bool) {
	info := e.Info
	if info.Version == "" {
		return Attr{}, false // patched in by this mount, not listed
	}
	if fs.listsMetadata(ctx, l) {
		if _, ok := info.Metadata[SymlinkMeta]; !ok && e.Kind == meta.KindSymlink {
			return Attr{}, false // its target is its body
		}
		return fs.entryAttr(e.Kind, info), true
	}
	if e.Kind != meta.KindFile || maybeNode(info) {
		return Attr{}, false
	}
	if md, ok := fs.knownMetadata(l, info.Version); ok {
		info.Metadata = md
		if kind := kindOf(info); kind != meta.KindFile {
			return Attr{}, false
		}
		return fs.entryAttr(meta.KindFile, info), true
	}
	if fs.opts.ExactAttrs {
		return Attr{}, false
	}
	return fs.entryAttr(meta.KindFile, info), true
}

// fullInfo returns info, the object l as a cached listing or stat showed
// it, with its user metadata: a listing without metadata (S3) lacks it,
// and a file made from the object (opened for writing) must keep its
// attributes. It is known (this mount uploaded or stat'ed that
// version), or a HEAD tells.
func (fs *FS) fullInfo(ctx context.Context, l Loc, info objstore.ObjectInfo) (objstore.ObjectInfo, error) {
	if info.Metadata != nil || fs.listsMetadata(ctx, l) {
		return info, nil
	}
	if md, ok := fs.knownMetadata(l, info.Version); ok {
		info.Metadata = md
		return info, nil
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return info, err
	}
	cur, err := st.Stat(ctx, l.Key)
	if err != nil {
		fs.logErr("open", l, err)
		return info, err
	}
	switch kindOf(cur) {
	case meta.KindFile:
	case meta.KindSymlink:
		return info, syscall.ELOOP // replaced meanwhile
	default:
		return info, syscall.ENXIO // a special file: the kernel opens it
	}
	fs.putStat(l, meta.KindFile, cur)
	return cur, nil
}

// completeCreated fills in e, the entry in ls of a file created through
// the mount (patched in without size or version, marked) and uploaded
// since, from this mount's last upload of it when that landed after the
// entry was made: the listing then answers stats and ls -l for it without
// a LIST. ok is false when no such upload is remembered or the file is
// being written again; the entry is then left as it was.
func (fs *FS) completeCreated(dir Loc, ls *meta.Listing, e meta.DirEntry) (meta.DirEntry, bool) {
	t := dir.child(e.Name).target()
	wb := fs.deps.Writeback
	info, ok := wb.UploadedInfo(t, e.Mark)
	if !ok || wb.Get(t) != nil {
		return e, false
	}
	done := meta.DirEntry{Name: e.Name, Kind: meta.KindFile, Info: info, Mark: e.Mark}
	created := func(cur meta.DirEntry) bool {
		return cur.Kind == meta.KindFile && cur.Info.Version == "" && cur.Mark == e.Mark
	}
	if !ls.Replace(e.Name, created, done) {
		return e, false
	}
	// An open for writing registers its file before it resets the entry
	// (noteCreated): one that raced the lines above is seen here, and
	// the entry goes back to "created" for it.
	if again, ok := wb.UploadedInfo(t, e.Mark); !ok || again.Version != info.Version || wb.Get(t) != nil {
		ls.Replace(e.Name, func(cur meta.DirEntry) bool { return cur.Info.Version == info.Version && cur.Mark == e.Mark }, e)
		return e, false
	}
	return done, true
}
