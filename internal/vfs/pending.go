package vfs

import (
	"context"
	"strings"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Old names of renamed files stay in the bucket until writeback deletes
// them (once the new name is durable); the namespace hides them at once
// (writeback.Manager.PendingDelete). A directory that holds nothing else
// is then empty: it can be removed, and without a marker it is gone.

// liveUnder reports whether the bucket holds a key below the directory l
// other than its marker (when skipMarker) and the old names writeback is
// about to delete. It lists no more keys than there are such names, plus
// two.
//
// before is what PendingDeletes said before the caller listed the bucket
// (nil when it did not): a key pending then and deleted since may still
// be in the caller's listing, and in this one.
func (fs *FS) liveUnder(ctx context.Context, st objstore.Store, l Loc, skipMarker bool, before []string) (bool, error) {
	prefix := l.dirPrefix()
	pending := fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, prefix)
	hidden := make(map[string]bool, len(pending)+len(before)+1)
	for _, k := range pending {
		hidden[k] = true
	}
	for _, k := range before {
		if strings.HasPrefix(k, prefix) {
			hidden[k] = true
		}
	}
	if skipMarker {
		hidden[prefix] = true
	}
	page, err := st.List(ctx, objstore.ListOptions{Prefix: prefix, MaxKeys: len(hidden) + 1})
	if err != nil {
		return false, err
	}
	for _, o := range page.Objects {
		if !hidden[o.Key] {
			return true, nil
		}
	}
	// Every key listed is hidden; a page cut short may hide more.
	return page.NextToken != "", nil
}

// hiddenDir reports whether the directory l, which the bucket shows
// through keys below it, holds only old names pending deletion (and no
// marker): it is then not shown. Without pending deletes below l it
// costs nothing. before (sorted) is what PendingDeletes said before the
// caller's listing, which showed l: an old name deleted since (and no
// longer pending) still hides, else a listing that caught it just before
// its delete would show a directory that is gone, and the stat cache
// would keep it.
func (fs *FS) hiddenDir(ctx context.Context, st objstore.Store, l Loc, before []string) (bool, error) {
	prefix := l.dirPrefix()
	if len(fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, prefix)) == 0 && !hasPrefixed(before, prefix) {
		return false, nil
	}
	live, err := fs.liveUnder(ctx, st, l, false, before)
	return !live, err
}

// clearPending deletes now the object at l when it is the old name of a
// renamed file (pending deletion), before l becomes a directory: some
// stores (MinIO) do not list the keys below l while an object l exists.
// The renamed file first copies the bytes it reads from it (Detach).
func (fs *FS) clearPending(ctx context.Context, st objstore.Store, l Loc) error {
	if !fs.deps.Writeback.PendingDelete(l.target()) {
		return nil
	}
	if err := fs.deps.Writeback.Detach(ctx, l.target()); err != nil {
		return err
	}
	if err := st.Delete(ctx, l.Key, objstore.DeleteOptions{}); err != nil {
		fs.logErr("mkdir", l, err)
		return err
	}
	return nil
}

// clearPendingBelow deletes now the old names pending deletion below dst
// at which moving the directory src to dst makes a directory (an old
// file d/x, and a subdirectory x of src): as for clearPending, MinIO does
// not list the keys below d/x while the object d/x exists, and once they
// are gone it still lists d/x/ as a directory. Without pending deletes
// below dst (the common case) it costs nothing.
func (fs *FS) clearPendingBelow(ctx context.Context, st objstore.Store, src, dst Loc) error {
	dp := dst.dirPrefix()
	pending := fs.deps.Writeback.PendingDeletes(dst.Scheme, dst.Bucket, dp)
	if len(pending) == 0 {
		return nil
	}
	sp := src.dirPrefix()
	dirs := map[string]bool{} // keys below dst that become directories
	addDirs := func(k string) {
		rest := strings.TrimPrefix(k, sp)
		for i := range len(rest) {
			if rest[i] == '/' {
				dirs[dp+rest[:i]] = true
			}
		}
	}
	for _, f := range fs.deps.Writeback.List(src.Scheme, src.Bucket, sp) {
		addDirs(f.Target().Key)
	}
	objs, _, err := objstore.ListAll(ctx, st, objstore.ListOptions{Prefix: sp})
	if err != nil {
		return err
	}
	for _, o := range objs {
		addDirs(o.Key)
	}
	for _, k := range pending {
		if dirs[k] {
			if err := fs.clearPending(ctx, st, Loc{Scheme: dst.Scheme, Bucket: dst.Bucket, Key: k}); err != nil {
				return err
			}
		}
	}
	return nil
}

// ghostPrefix reports whether the common prefix pf of a listing made
// since t is the ghost of a write of this process to the key pf names
// (objstore.Track: MinIO lists a key being put or deleted as a
// directory of its name for a moment): a write to that key ran during
// the listing and no key is below pf. Other prefixes cost nothing.
func (fs *FS) ghostPrefix(ctx context.Context, st objstore.Store, pf string, t time.Time) (bool, error) {
	if !objstore.WrittenSince(st, strings.TrimSuffix(pf, "/"), t) {
		return false, nil
	}
	page, err := st.List(ctx, objstore.ListOptions{Prefix: pf, MaxKeys: 1})
	if err != nil {
		return false, err
	}
	return len(page.Objects) == 0, nil
}
