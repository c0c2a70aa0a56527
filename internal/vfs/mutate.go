package vfs

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Unlink removes the file or symlink p.
func (fs *FS) Unlink(ctx context.Context, p string) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	if l.Key == "" {
		return syscall.EISDIR
	}
	a, err := fs.getattr(ctx, l)
	if err != nil {
		return err
	}
	if a.Kind == meta.KindDir {
		return syscall.EISDIR
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return err
	}
	// Descriptors open on the file keep reading its bytes.
	if err := fs.orphanHandles(ctx, l); err != nil {
		return err
	}
	wb := fs.deps.Writeback
	// staged: a dirty file that never read from an object at l (it was
	// created, or truncated, here): mostly there is no object to delete.
	staged := false
	if f := wb.Get(l.target()); f != nil {
		staged = !f.HasBase(l.Key)
		wb.Remove(l.target())
		// The name is gone: an interrupt (EINTR) from now on would make
		// the retried unlink fail with ENOENT. Finish it.
		ctx = context.WithoutCancel(ctx)
	}
	// No upload of ours may land after the delete, and no dirty file may
	// still read from this object.
	if err := wb.Detach(ctx, l.target()); err != nil {
		return err
	}
	// The object may exist in the bucket even when a dirty copy did (an
	// overwrite in progress); delete it too. Deleting a missing key is fine.
	// Once the request is out the server may carry it out whatever the
	// client does: an interrupt (EINTR) then would make the retried unlink
	// fail with ENOENT (soak model seed 1796579436646992233). Finish it;
	// the store's request timeout bounds it.
	ctx = context.WithoutCancel(ctx)
	if err := st.Delete(ctx, l.Key, objstore.DeleteOptions{}); err != nil {
		if !staged || !objstore.Retryable(err) || ctx.Err() != nil {
			fs.logErr("unlink", l, err)
			return err
		}
		// The staged file is gone (the name is); only the delete of an
		// object that is most likely not there failed: the store is
		// unreachable. The unlink stands.
		fs.log.Warn("unlink: could not delete the name in the bucket; it may show again",
			"path", l.URL(), "err", err.Error())
	}
	fs.noteRemoved(l)
	fs.deps.Meta.PutNegative(l.cacheKey())
	fs.noteEntryChanged(l)
	return nil
}

// Symlink creates the symlink p pointing at target, owned by the caller.
// Any target up to PATH_MAX is kept (in the object's body when metadata
// cannot hold it: see writeback.SymlinkBody).
func (fs *FS) Symlink(ctx context.Context, p, target string) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	if l.Key == "" {
		return syscall.EPERM
	}
	if err := refuseHidden(l); err != nil {
		return err
	}
	if err := writeback.ValidSymlinkTarget(target); err != nil {
		return err
	}
	if _, err := fs.getattr(ctx, l); err == nil {
		return syscall.EEXIST
	}
	if err := fs.deps.Writeback.Node(l.target(), target, fs.newAttrs(ctx, l, 0o777, false)); err != nil {
		return err
	}
	fs.noteCreated(l, meta.KindSymlink)
	fs.noteEntryChanged(l)
	return nil
}

// Readlink returns the target of the symlink p.
func (fs *FS) Readlink(ctx context.Context, p string) (string, error) {
	l, err := Parse(p)
	if err != nil {
		return "", err
	}
	if f := fs.deps.Writeback.Get(l.target()); f != nil {
		if t := f.Symlink(); t != "" {
			return t, nil
		}
		return "", syscall.EINVAL
	}
	info, kind, err := fs.revalidate(ctx, l)
	if err != nil {
		return "", err
	}
	if kind != meta.KindSymlink {
		return "", syscall.EINVAL
	}
	if _, ok := info.Metadata[SymlinkMeta]; !ok {
		// The target is the object's body (cached entries have it).
		st, err := fs.store(ctx, l)
		if err != nil {
			return "", err
		}
		if info, err = fs.completeInfo(ctx, st, info); err != nil {
			fs.logErr("readlink", l, err)
			return "", err
		}
		fs.putStat(l, kind, info)
	}
	return info.Metadata[SymlinkMeta], nil
}

// RenameFlags are renameat2(2) flags.
type RenameFlags struct {
	NoReplace bool
	Exchange  bool
}

// Rename moves a file, symlink or directory. Dirty files are re-keyed
// (uploaded once, under the new name); clean objects are copied on the
// server and then deleted. Renames across buckets fail with EXDEV, which
// makes mv(1) fall back to copy and delete.
func (fs *FS) Rename(ctx context.Context, from, to string, fl RenameFlags) error {
	src, err := Parse(from)
	if err != nil {
		return err
	}
	dst, err := Parse(to)
	if err != nil {
		return err
	}
	if src.Key == "" || dst.Key == "" {
		return syscall.EPERM
	}
	if err := refuseHidden(dst); err != nil {
		return err
	}
	if fl.Exchange {
		return syscall.EINVAL
	}
	if src.Scheme != dst.Scheme || src.Bucket != dst.Bucket {
		return syscall.EXDEV
	}
	if src.Key == dst.Key {
		return nil
	}
	if strings.HasPrefix(dst.Key, src.Key+"/") {
		return syscall.EINVAL // into itself
	}
	a, err := fs.getattr(ctx, src)
	if err != nil {
		return err
	}
	if da, err := fs.getattr(ctx, dst); err == nil {
		if fl.NoReplace {
			return syscall.EEXIST
		}
		switch {
		case a.Kind == meta.KindDir && da.Kind != meta.KindDir:
			return syscall.ENOTDIR
		case a.Kind != meta.KindDir && da.Kind == meta.KindDir:
			return syscall.EISDIR
		case da.Kind == meta.KindDir:
			if err := fs.Rmdir(ctx, to); err != nil {
				return err // ENOTEMPTY
			}
		}
	}
	st, err := fs.store(ctx, src)
	if err != nil {
		return err
	}
	if a.Kind == meta.KindDir {
		if err := fs.clearPending(ctx, st, dst); err != nil {
			return err
		}
		if err := fs.clearPendingBelow(ctx, st, src, dst); err != nil {
			return err
		}
		err = fs.renameDir(ctx, st, src, dst)
	} else {
		err = fs.renameOne(ctx, st, src, dst)
	}
	if err != nil {
		fs.logErr("rename", src, err)
		return err
	}
	fs.noteRemoved(src)
	fs.deps.Meta.ForgetList(src.cacheKey())
	fs.noteCreated(dst, a.Kind)
	fs.deps.Meta.ForgetList(dst.cacheKey())
	if a.Kind == meta.KindDir {
		fs.moveDirs(src, dst)
	}
	fs.noteEntryChanged(src)
	fs.noteEntryChanged(dst)
	return nil
}

// renameOne moves one key (file, symlink or marker).
func (fs *FS) renameOne(ctx context.Context, st objstore.Store, src, dst Loc) error {
	wb := fs.deps.Writeback
	// Descriptors open on a file replaced at dst keep its bytes.
	if err := fs.orphanHandles(ctx, dst); err != nil {
		return err
	}
	if f := wb.Get(src.target()); f != nil {
		// The writeback layer deletes the source key after the new key is
		// durable when the dirty file still reads from it (its base);
		// otherwise an older object at the source is deleted here.
		if err := wb.Rename(src.target(), dst.target()); err != nil {
			return err
		}
		// The name moved: an interrupt (EINTR) from now on would make the
		// retried rename fail with ENOENT. Finish it.
		ctx = context.WithoutCancel(ctx)
		fs.moveHandles(src, dst, nil)
		if f.HasBase(src.Key) {
			return nil
		}
		err := fs.deleteKey(ctx, st, src)
		if err != nil && objstore.Retryable(err) && ctx.Err() == nil {
			// The name moved (the file is staged under dst and becomes
			// durable there through writeback); only the removal of an
			// older object at src failed, mostly because there was none
			// and the store is unreachable. The rename stands.
			fs.log.Warn("rename: could not delete the old name in the bucket; it may show again",
				"from", src.URL(), "to", dst.URL(), "err", err.Error())
			return nil
		}
		return err
	}
	if wb.Get(dst.target()) != nil {
		wb.Remove(dst.target())
	}
	if err := wb.Detach(ctx, dst.target()); err != nil {
		return err
	}
	// Descriptors that pass through read the version they opened from its
	// cache file: keep it whole before the object goes.
	fs.keepSnapshots(ctx, src)
	info, err := fs.copyRenamed(ctx, st, src, dst)
	if err != nil {
		return err
	}
	info.Key = dst.Key
	fs.moveHandles(src, dst, map[string]objstore.ObjectInfo{src.Key: info})
	return fs.deleteKey(ctx, st, src)
}

// copyRenamed copies the clean object src to dst for a rename, with its
// change time set to now (the rename changed it), as POSIX file systems
// do. When the object changed since its metadata was read, it is copied
// with the metadata it has.
func (fs *FS) copyRenamed(ctx context.Context, st objstore.Store, src, dst Loc) (objstore.ObjectInfo, error) {
	cur, err := st.Stat(ctx, src.Key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	md := maps.Clone(cur.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	delete(md, writeback.MetaUpload)
	md[writeback.MetaCtime] = strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, ok := md[writeback.MetaMtime]; !ok && !cur.ModTime.IsZero() {
		md[writeback.MetaMtime] = strconv.FormatInt(cur.ModTime.UnixNano(), 10) // it keeps its mtime
	}
	info, err := st.Copy(ctx, src.Key, dst.Key, objstore.CopyOptions{IfVersion: cur.Version, Metadata: md})
	if errIs(err, objstore.ErrPrecondition) {
		return st.Copy(ctx, src.Key, dst.Key, objstore.CopyOptions{})
	}
	return info, err
}

// deleteKey deletes the object at l once no upload of ours can land on it
// and no dirty file reads from it.
func (fs *FS) deleteKey(ctx context.Context, st objstore.Store, l Loc) error {
	if err := fs.deps.Writeback.Detach(ctx, l.target()); err != nil {
		return err
	}
	return st.Delete(ctx, l.Key, objstore.DeleteOptions{})
}

// renameDir moves every key under src/ (and dirty files there) to dst/.
func (fs *FS) renameDir(ctx context.Context, st objstore.Store, src, dst Loc) error {
	// Keys move one at a time: an interrupt (EINTR) after the first one
	// would leave the directory half moved, and the retried rename would
	// fail with ENOTEMPTY on the part already at dst. Finish it (errors
	// of the store still stop it: see Limits in the README).
	ctx = context.WithoutCancel(ctx)
	fs.keepSnapshotsUnder(ctx, src) // the objects below go (see renameOne)
	sp, dp := src.Key+"/", dst.Key+"/"
	// Dirty files first, the bucket after: an upload that lands (and whose
	// file writeback then forgets) between the two looks is then in the
	// listing. Listed first, it could be in neither (the listing before it
	// landed, the dirty files after it was forgotten) and stay behind
	// under the old name.
	seen := map[string]bool{}
	for _, f := range fs.deps.Writeback.List(src.Scheme, src.Bucket, sp) {
		k := f.Target().Key
		seen[k] = true
		nl := Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: dp + strings.TrimPrefix(k, sp)}
		if err := fs.renameOne(ctx, st, Loc{Scheme: src.Scheme, Bucket: src.Bucket, Key: k}, nl); err != nil {
			return err
		}
		fs.deps.Meta.Forget(nl.cacheKey())
	}
	// Old names of renamed files (deleted by writeback once their new
	// name is durable) are not in the directory any more: they stay.
	// Asked before the listing: an old name that is deleted meanwhile is
	// then simply not listed.
	for _, k := range fs.deps.Writeback.PendingDeletes(src.Scheme, src.Bucket, sp) {
		seen[k] = true
	}
	objs, _, err := objstore.ListAll(ctx, st, objstore.ListOptions{Prefix: sp})
	if err != nil {
		return err
	}
	for _, o := range objs {
		if seen[o.Key] {
			continue
		}
		nk := dp + strings.TrimPrefix(o.Key, sp)
		if err := fs.deps.Writeback.Detach(ctx, Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: nk}.target()); err != nil {
			return err
		}
		info, err := st.Copy(ctx, o.Key, nk, objstore.CopyOptions{})
		if err != nil {
			return err
		}
		// The copy may keep the version (an ETag) of an object that was
		// at nk with other metadata: forget what a HEAD of that one told.
		fs.forgetKnown(Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: nk})
		info.Key = nk
		fs.moveHandles(Loc{Scheme: src.Scheme, Bucket: src.Bucket, Key: o.Key}, Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: nk}, map[string]objstore.ObjectInfo{o.Key: info})
		if err := fs.deleteKey(ctx, st, Loc{Scheme: src.Scheme, Bucket: src.Bucket, Key: o.Key}); err != nil {
			return err
		}
		fs.deps.Meta.Forget(src.Scheme + "/" + src.Bucket + "/" + strings.TrimSuffix(o.Key, "/"))
		fs.deps.Meta.Forget(dst.Scheme + "/" + dst.Bucket + "/" + strings.TrimSuffix(nk, "/"))
	}
	fs.moveHandles(src, dst, nil)
	// Keep the moved directory visible even if it had no marker (a
	// marker was copied with its metadata).
	marker := false
	for _, o := range objs {
		marker = marker || o.Key == sp
	}
	if !marker {
		if _, err := st.Put(ctx, dp, emptyReader{}, 0, objstore.PutOptions{}); err != nil {
			return err
		}
	}
	if err := fs.dropDirObject(ctx, st, src); err != nil {
		return err
	}
	fs.deps.Meta.Clear() // names below both trees changed
	return nil
}

// Link is not supported: object stores have no hard links.
func (fs *FS) Link(context.Context, string, string) error { return syscall.ENOTSUP }

// Statfs reports large, constant figures: a bucket has no fixed size.
type Statfs struct {
	Blocks, Bfree, Files, Ffree uint64
	Bsize                       uint32
	NameMax                     uint32 // the longest name ferry accepts
}

// StatFS returns the figures df shows.
func (fs *FS) StatFS() Statfs {
	const huge = 1 << 50
	return Statfs{Blocks: huge / 4096, Bfree: huge / 4096, Files: 1 << 40, Ffree: 1 << 40, Bsize: 4096, NameMax: NameMax}
}
