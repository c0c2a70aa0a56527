package vfs

import (
	"context"

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
func (fs *FS) liveUnder(ctx context.Context, st objstore.Store, l Loc, skipMarker bool) (bool, error) {
	prefix := l.dirPrefix()
	pending := fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, prefix)
	hidden := make(map[string]bool, len(pending)+1)
	for _, k := range pending {
		hidden[k] = true
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
// costs nothing.
func (fs *FS) hiddenDir(ctx context.Context, st objstore.Store, l Loc) (bool, error) {
	if len(fs.deps.Writeback.PendingDeletes(l.Scheme, l.Bucket, l.dirPrefix())) == 0 {
		return false, nil
	}
	live, err := fs.liveUnder(ctx, st, l, false)
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
