package vfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// ErrOutsideMount is wrapped by Materialize when a symlink's target does
// not name an object of the mount (an absolute path elsewhere, a relative
// path climbing above the mount root, or a whole bucket).
var ErrOutsideMount = errors.New("symlink target is not an object under the mount")

// maxLinkHops bounds symlink chains, like the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// Materialize replaces the symlink at linkPath (mount-relative,
// "s3/bucket/work/out.bam") by a copy of what it points to, so that a
// reader of the bucket outside the mount sees data instead of a link
// object (Nextflow symlink compaction).
//
// The target is resolved like the kernel would: a relative target against
// the link's directory, an absolute one only if it lies below mountPoint
// (the absolute path the mount is served at, e.g. "/fusion"); chains of
// links are followed. A file is copied on the server (Store.Copy) within a
// bucket and streamed (read, then Put or multipart) across buckets; a
// directory is copied key by key, and the link object is then deleted so
// the name becomes that directory. Dirty sources are made durable first,
// and so is the link itself, so that no pending upload of the link can land
// after the copy; the link's dirty file is dropped only once the copy has
// succeeded.
//
// On any error the link is left as it was. Errors: syscall.EINVAL when
// linkPath is not a symlink; an error wrapping ErrOutsideMount for targets
// outside the mount; syscall.ENOENT for a dangling link; syscall.ELOOP for
// a chain longer than 40 links or a directory linked into itself; else
// backend errors (objstore sentinels) and Sync errors.
func (fs *FS) Materialize(ctx context.Context, linkPath, mountPoint string) error {
	l, err := Parse(linkPath)
	if err != nil {
		return err
	}
	if l.Key == "" {
		return syscall.EINVAL
	}
	src, a, err := fs.followLink(ctx, l, mountPoint)
	if err != nil {
		return fmt.Errorf("materialize %s: %w", l.URL(), err)
	}
	if a.Kind == meta.KindDir {
		err = fs.materializeDir(ctx, l, src)
	} else {
		err = fs.materializeFile(ctx, l, src)
	}
	if err != nil {
		fs.logErr("materialize", l, err)
		return fmt.Errorf("materialize %s -> %s: %w", l.URL(), src.URL(), err)
	}
	return nil
}

// followLink resolves the chain of links starting at l to the first name
// that is not a link, and returns it with its attributes.
func (fs *FS) followLink(ctx context.Context, l Loc, mountPoint string) (Loc, Attr, error) {
	cur := l
	for range maxLinkHops {
		target, err := fs.Readlink(ctx, cur.String())
		if err != nil {
			return Loc{}, Attr{}, err
		}
		next, err := linkTarget(cur, target, mountPoint)
		if err != nil {
			return Loc{}, Attr{}, err
		}
		a, err := fs.getattr(ctx, next)
		if err != nil {
			return Loc{}, Attr{}, fmt.Errorf("target %s: %w", next.URL(), err)
		}
		if a.Kind != meta.KindSymlink {
			return next, a, nil
		}
		cur = next
	}
	return Loc{}, Attr{}, syscall.ELOOP
}

// linkTarget resolves the target text of the link at l.
func linkTarget(l Loc, target, mountPoint string) (Loc, error) {
	var rel string
	if path.IsAbs(target) {
		mp := strings.TrimSuffix(path.Clean(mountPoint), "/")
		r, ok := strings.CutPrefix(path.Clean(target), mp+"/")
		if !ok {
			return Loc{}, fmt.Errorf("%q is not below %s: %w", target, mp, ErrOutsideMount)
		}
		rel = r
	} else {
		par, _ := l.parent()
		rel = path.Join(par.String(), target)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return Loc{}, fmt.Errorf("%q climbs above the mount root: %w", target, ErrOutsideMount)
		}
	}
	t, err := Parse(rel)
	if err != nil || t.Key == "" {
		return Loc{}, fmt.Errorf("%q does not name an object: %w", target, ErrOutsideMount)
	}
	return t, nil
}

// syncDirty makes the dirty file at l (if any) durable.
func (fs *FS) syncDirty(ctx context.Context, l Loc) error {
	if f := fs.deps.Writeback.Get(l.target()); f != nil {
		return f.Sync(ctx)
	}
	return nil
}

// materializeFile copies the file src over the link l.
func (fs *FS) materializeFile(ctx context.Context, l, src Loc) error {
	if err := fs.syncDirty(ctx, src); err != nil {
		return err
	}
	if err := fs.syncDirty(ctx, l); err != nil {
		return err
	}
	info, err := fs.copyObject(ctx, src, l)
	if err != nil {
		return err
	}
	fs.deps.Writeback.Remove(l.target())
	fs.noteRemoved(l)
	fs.noteCreated(l, meta.KindFile)
	fs.deps.Meta.PutStat(l.cacheKey(), meta.KindFile, info)
	return nil
}

// materializeDir copies every key below the directory src to below l,
// then deletes the link object l.
func (fs *FS) materializeDir(ctx context.Context, l, src Loc) error {
	sp, dp := src.Key+"/", l.Key+"/"
	if src.Scheme == l.Scheme && src.Bucket == l.Bucket && (strings.HasPrefix(dp, sp) || strings.HasPrefix(sp, dp)) {
		return fmt.Errorf("directory linked into itself: %w", syscall.ELOOP)
	}
	for _, f := range fs.deps.Writeback.List(src.Scheme, src.Bucket, sp) {
		if err := f.Sync(ctx); err != nil {
			return err
		}
	}
	if err := fs.syncDirty(ctx, l); err != nil {
		return err
	}
	srcSt, err := fs.store(ctx, src)
	if err != nil {
		return err
	}
	objs, _, err := objstore.ListAll(ctx, srcSt, objstore.ListOptions{Prefix: sp})
	if err != nil {
		return err
	}
	for _, o := range objs {
		from := Loc{Scheme: src.Scheme, Bucket: src.Bucket, Key: o.Key}
		to := Loc{Scheme: l.Scheme, Bucket: l.Bucket, Key: dp + strings.TrimPrefix(o.Key, sp)}
		if _, err := fs.copyObject(ctx, from, to); err != nil {
			return err
		}
	}
	dstSt, err := fs.store(ctx, l)
	if err != nil {
		return err
	}
	// The marker keeps an empty directory visible.
	if _, err := dstSt.Put(ctx, dp, emptyReader{}, 0, objstore.PutOptions{}); err != nil {
		return err
	}
	if err := dstSt.Delete(ctx, l.Key, objstore.DeleteOptions{}); err != nil {
		return err
	}
	fs.deps.Writeback.Remove(l.target())
	fs.noteRemoved(l)
	fs.noteCreated(l, meta.KindDir)
	fs.deps.Meta.Clear() // every name below l is new
	return nil
}

// copyObject copies one object: on the server within a bucket, streamed
// across buckets. The source's user metadata goes along.
func (fs *FS) copyObject(ctx context.Context, from, to Loc) (objstore.ObjectInfo, error) {
	dst, err := fs.store(ctx, to)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if from.Scheme == to.Scheme && from.Bucket == to.Bucket {
		return dst.Copy(ctx, from.Key, to.Key, objstore.CopyOptions{})
	}
	src, err := fs.store(ctx, from)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return streamCopy(ctx, src, from.Key, dst, to.Key)
}
