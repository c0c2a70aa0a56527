package vfs

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// DirEntry is one name of a directory.
type DirEntry struct {
	Name string
	Kind meta.Kind
}

// Readdir lists the directory p: remote keys and prefixes (paginated),
// marker objects folded away, merged with files not yet uploaded.
func (fs *FS) Readdir(ctx context.Context, p string) ([]DirEntry, error) {
	l, err := Parse(p)
	if err != nil {
		return nil, err
	}
	switch {
	case l.isRoot():
		out := make([]DirEntry, 0, len(Schemes))
		for _, s := range Schemes {
			out = append(out, DirEntry{Name: s, Kind: meta.KindDir})
		}
		return out, nil
	case l.isScheme():
		var out []DirEntry
		for _, b := range fs.knownBuckets(l.Scheme) {
			out = append(out, DirEntry{Name: b, Kind: meta.KindDir})
		}
		return out, nil
	}
	ls, err := fs.listing(ctx, l)
	if err != nil {
		return nil, err
	}
	fs.walkAhead(l)
	ents := ls.Entries()
	out := make([]DirEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, DirEntry{Name: e.Name, Kind: e.Kind})
	}
	return out, nil
}

// listing returns the (cached) listing of directory l, merged with dirty
// files below it.
func (fs *FS) listing(ctx context.Context, l Loc) (*meta.Listing, error) {
	return fs.listDir(ctx, l, 0, func(ls *meta.Listing) bool { return !fs.staleCreated(l, ls) })
}

// lookupMaxPages caps a listing made for lookups (not for readdir): a
// directory with more entries is answered name by name.
const lookupMaxPages = 100

// listDir returns the cached listing of l when fresh (and ok accepts it),
// else lists l: at most maxPages pages when maxPages > 0 (meta.ErrTooBig
// beyond). Concurrent callers share one listing (meta.Cache.LoadList).
func (fs *FS) listDir(ctx context.Context, l Loc, maxPages int, ok func(*meta.Listing) bool) (*meta.Listing, error) {
	for try := 0; ; try++ {
		ls, err := fs.deps.Meta.LoadList(l.cacheKey(), maxPages > 0, ok, func() ([]meta.DirEntry, error) {
			return fs.loadDir(ctx, l, maxPages)
		})
		if try < 3 && err != nil && ctx.Err() == nil && (errIs(err, context.Canceled) || errIs(err, context.DeadlineExceeded)) {
			continue // the caller whose listing we shared was interrupted, not us
		}
		return ls, err
	}
}

// loadDir lists the directory l (see listDir), merged with dirty files
// below it.
func (fs *FS) loadDir(ctx context.Context, l Loc, maxPages int) ([]meta.DirEntry, error) {
	st, err := fs.store(ctx, l)
	if err != nil {
		fs.logErr("readdir", l, err)
		return nil, err
	}
	prefix := l.dirPrefix()
	// Dirty files and old names pending deletion are looked at before the
	// bucket: a file whose upload lands (and which writeback then forgets)
	// between the two looks is then in the listing. Looked at after, it
	// could be in neither (see TestReaddirRacesUpload).
	dirty := fs.dirtyEntries(l, prefix, fs.deps.Writeback.UploadMark())
	pending := fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, prefix)
	var ents []meta.DirEntry
	objects := map[string]bool{} // names of the objects listed (see layout.go)
	listMeta := st.Caps().ListMetadata
	since := time.Now() // for ghostPrefix
	opts := objstore.ListOptions{Prefix: prefix, Delimiter: "/"}
	for pages := 1; ; pages++ {
		if maxPages > 0 && pages > maxPages {
			return nil, meta.ErrTooBig
		}
		page, err := st.List(ctx, opts)
		if err != nil {
			fs.logErr("readdir", l, err)
			return nil, err
		}
		if pages == 1 && l.Key != "" && (len(page.Objects) == 0 || page.Objects[0].Key != prefix) {
			fs.noMarker(l) // a marker is the first key below l
		}
		for _, o := range page.Objects {
			name := strings.TrimPrefix(o.Key, prefix)
			if !validName(name) {
				if name != "" { // not the directory's own marker
					fs.logOdd(l, o.Key)
				}
				continue
			}
			if hiddenName(name) {
				continue // another tool's directory marker
			}
			k := meta.KindFile
			if listMeta {
				k = kindOf(o) // else only a HEAD tells
			}
			if k == meta.KindDir { // a directory object
				fs.noteShadowed(l.child(name), true)
				o = objstore.ObjectInfo{}
			}
			objects[name] = true
			ents = append(ents, meta.DirEntry{Name: name, Kind: k, Info: o})
		}
		for _, pf := range page.Prefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(pf, prefix), "/")
			if !validName(name) {
				fs.logOdd(l, pf)
				continue
			}
			// Only a prefix holding old names pending deletion may be
			// hidden (hiddenDir scans the pending deletes: not per prefix).
			if hasPrefixed(pending, pf) {
				if hidden, err := fs.hiddenDir(ctx, st, l.child(name), pending); err != nil {
					fs.logErr("readdir", l, err)
					return nil, err
				} else if hidden {
					continue // only old names of renamed files, about to go
				}
			}
			if ghost, err := fs.ghostPrefix(ctx, st, pf, since); err != nil {
				fs.logErr("readdir", l, err)
				return nil, err
			} else if ghost {
				continue // a name this mount is writing, not a directory
			}
			if objects[name] {
				fs.noteShadowed(l.child(name), false) // the directory hides the object
			}
			ents = append(ents, meta.DirEntry{Name: name, Kind: meta.KindDir})
		}
		if page.NextToken == "" {
			break
		}
		opts.Token = page.NextToken
	}
	if len(ents) == 0 && l.Key != "" {
		// An empty listing: is the directory there at all?
		if _, err := fs.getattr(ctx, l); err != nil {
			return nil, err
		}
	}
	if len(pending) > 0 {
		gone := make(map[string]bool, len(pending))
		for _, k := range pending {
			gone[k] = true
		}
		ents = slices.DeleteFunc(ents, func(e meta.DirEntry) bool {
			return e.Kind != meta.KindDir && gone[prefix+e.Name]
		})
	}
	ents = append(ents, dirty...) // a dirty file replaces its listed object
	fs.markersAhead(st, l, ents)
	return ents, nil
}

// hasPrefixed reports whether a key of sorted starts with prefix.
func hasPrefixed(sorted []string, prefix string) bool {
	i, _ := slices.BinarySearch(sorted, prefix)
	return i < len(sorted) && strings.HasPrefix(sorted[i], prefix)
}

// dirtyEntries returns the entries of directory l (whose prefix is
// prefix) that dirty or open files make: the files themselves (marked
// with mark, see meta.DirEntry), and the subdirectories holding some.
func (fs *FS) dirtyEntries(l Loc, prefix string, mark uint64) []meta.DirEntry {
	var ents []meta.DirEntry
	for _, f := range fs.deps.Writeback.List(l.Scheme, l.Bucket, prefix) {
		key := f.Target().Key
		if !strings.HasPrefix(key, prefix) {
			continue // renamed away meanwhile
		}
		rest := key[len(prefix):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			ents = append(ents, meta.DirEntry{Name: rest[:i], Kind: meta.KindDir})
		} else if validName(rest) {
			k := kindOfMode(f.Mode())
			if f.Symlink() != "" {
				k = meta.KindSymlink
			}
			ents = append(ents, meta.DirEntry{Name: rest, Kind: k, Mark: mark})
		}
	}
	return ents
}

// validName reports whether n can be a name in a directory.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= NameMax && !strings.ContainsAny(n, "/\x00") && utf8.ValidString(n)
}

// noteCreated patches cached state after a name appeared at l.
func (fs *FS) noteCreated(l Loc, kind meta.Kind) {
	fs.deps.Meta.Forget(l.cacheKey())
	fs.forgetKnown(l)
	par, name := l.parent()
	fs.deps.Meta.AddEntry(par.cacheKey(), meta.DirEntry{Name: name, Kind: kind, Mark: fs.deps.Writeback.UploadMark()})
	// Ancestors that were only implied by keys may now exist.
	for par.Key != "" {
		fs.deps.Meta.Forget(par.cacheKey())
		gp, pname := par.parent()
		fs.deps.Meta.AddEntry(gp.cacheKey(), meta.DirEntry{Name: pname, Kind: meta.KindDir})
		par = gp
	}
}

// noteRemoved patches cached state after the name at l went away.
func (fs *FS) noteRemoved(l Loc) {
	fs.deps.Meta.Forget(l.cacheKey())
	fs.forgetKnown(l)
	fs.deps.Meta.ForgetList(l.cacheKey())
	par, name := l.parent()
	fs.deps.Meta.RemoveEntry(par.cacheKey(), name)
	// A directory above may now show empty, or not at all.
	for par.Key != "" {
		par, _ = par.parent()
		fs.deps.Meta.Touch(par.cacheKey())
	}
}

// Mkdir creates the directory p with mode 0755 (see MkdirMode).
func (fs *FS) Mkdir(ctx context.Context, p string) error {
	return fs.MkdirMode(ctx, p, 0o755)
}

// MkdirMode creates the directory p as a marker object "p/" whose
// metadata holds the permission bits mode (the kernel applied the
// umask), the caller as owner and the times.
func (fs *FS) MkdirMode(ctx context.Context, p string, mode uint32) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	if l.Key == "" {
		return syscall.EPERM // buckets are not created through the mount
	}
	if err := refuseHidden(l); err != nil {
		return err
	}
	if _, err := fs.getattr(ctx, l); err == nil {
		return syscall.EEXIST
	} else if !errIs(err, syscall.ENOENT) && !errIs(err, objstore.ErrNotFound) {
		return err
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return err
	}
	if err := fs.clearPending(ctx, st, l); err != nil {
		return err
	}
	w := fs.newAttrs(ctx, l, mode, true)
	now := time.Now()
	a := Attr{Kind: meta.KindDir, Mode: w.Mode, Uid: w.Uid, Gid: w.Gid, Atime: now, Mtime: now, Ctime: now}
	info, err := st.Put(ctx, l.Key+"/", emptyReader{}, 0, objstore.PutOptions{Metadata: markerMetadata(a)})
	if err != nil {
		fs.logErr("mkdir", l, err)
		return nameRefused(err)
	}
	fs.forgetDirs(l)
	fs.setDirAttr(l, a)
	fs.noteCreated(l, meta.KindDir)
	fs.deps.Meta.PutStat(l.cacheKey(), meta.KindDir, objstore.ObjectInfo{})
	fs.deps.Meta.PutStatWait(markerKey(l), meta.KindFile, info)
	fs.deps.Meta.PutList(l.cacheKey(), nil)
	fs.noteEntryChanged(l)
	return nil
}

// Rmdir removes the empty directory p (its marker, if any).
func (fs *FS) Rmdir(ctx context.Context, p string) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	if l.Key == "" {
		return syscall.EPERM
	}
	a, err := fs.getattr(ctx, l)
	if err != nil {
		return err
	}
	if a.Kind != meta.KindDir {
		return syscall.ENOTDIR
	}
	if fs.deps.Writeback.HasUnder(l.Scheme, l.Bucket, l.dirPrefix()) {
		return syscall.ENOTEMPTY
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return err
	}
	// Old names of renamed files, deleted once the new name is durable,
	// are gone for the task already (see Readdir).
	live, err := fs.liveUnder(ctx, st, l, true, nil)
	if err != nil {
		fs.logErr("rmdir", l, err)
		return err
	}
	if live {
		return syscall.ENOTEMPTY
	}
	// From the first delete on, an interrupt (EINTR) would make the
	// retried rmdir fail with ENOENT when the server carried it out:
	// finish it (see Unlink).
	ctx = context.WithoutCancel(ctx)
	if err := st.Delete(ctx, l.dirPrefix(), objstore.DeleteOptions{}); err != nil {
		fs.logErr("rmdir", l, err)
		return err
	}
	if err := fs.dropDirObject(ctx, st, l); err != nil {
		fs.logErr("rmdir", l, err)
		return err
	}
	fs.noteRemoved(l)
	fs.forgetDirs(l)
	fs.noteEntryChanged(l)
	return nil
}

type emptyReader struct{}

func (emptyReader) ReadAt(p []byte, off int64) (int, error) { return 0, ioEOF }

// staleCreated reports whether ls holds files created through the mount
// (patched in without size or version) that have been uploaded since and
// that this mount's uploads do not complete (completeCreated): the
// listing is then fetched again, so that ls -l answers from it.
func (fs *FS) staleCreated(l Loc, ls *meta.Listing) bool {
	for _, e := range ls.Entries() {
		if e.Kind == meta.KindFile && e.Info.Version == "" &&
			fs.deps.Writeback.Get(l.child(e.Name).target()) == nil {
			if _, ok := fs.completeCreated(l, ls, e); !ok {
				return true
			}
		}
	}
	return false
}
