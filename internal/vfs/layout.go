package vfs

import (
	"context"
	"strings"
	"syscall"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Buckets as other tools leave them:
//
//   - A key "a" beside keys under "a/": the directory wins and the object
//     "a" is hidden, whichever of the two a lookup, a listing or a stat
//     cache entry met first (meta.Listing keeps the directory; a lookup
//     without a listing asks for both at once; a cached stat of the object
//     gives way to a listing that shows the directory). MinIO lists no key
//     under "a/" while an object "a" exists (it answers GETs and HEADs of
//     them): there "a" is a directory only when something shows it (a
//     marker "a/", a listing of its parent, files staged below), and the
//     names below it that its listing lacks are asked for one by one
//     (shadowed).
//   - Hadoop's (s3n, EMRFS) "a_$folder$" markers are not shown.
//   - A zero-byte object "a" of type application/x-directory (old s3fs,
//     some consoles), or an Azure Data Lake blob with metadata
//     hdi_isfolder=true, is the directory "a"; rmdir and a rename of the
//     directory remove it with the marker.

// dirContentType is the media type of a directory object (s3fs).
const dirContentType = "application/x-directory"

// folderSuffix ends the name of a Hadoop (s3n, EMRFS) directory marker.
const folderSuffix = "_$folder$"

// maxLayoutNotes bounds FS.shadowed and FS.dirObjs (cleared when full).
const maxLayoutNotes = 10000

// hiddenName reports whether a listed name is never shown: the markers
// other tools leave beside a directory (Hadoop's "d_$folder$").
func hiddenName(name string) bool {
	return strings.HasSuffix(name, folderSuffix)
}

// isDirObject reports whether the object is a directory by its type: a
// zero-byte application/x-directory object, or an Azure Data Lake
// directory blob.
func isDirObject(info objstore.ObjectInfo) bool {
	if info.Size != 0 {
		return false
	}
	ct, _, _ := strings.Cut(info.ContentType, ";")
	return strings.EqualFold(strings.TrimSpace(ct), dirContentType) || strings.EqualFold(info.Metadata["hdi_isfolder"], "true")
}

// refuseHidden refuses to make a name a listing would not show.
func refuseHidden(l Loc) error {
	if _, name := l.parent(); hiddenName(name) {
		return syscall.EINVAL
	}
	return nil
}

// noteShadowed records that the directory l is also an object (its
// parent's listing held both, or the object is a directory object): its
// listing may lack names that are there (MinIO), so a name missing from
// it is asked for. dirObj: the object l itself is a directory object,
// removed with the directory.
func (fs *FS) noteShadowed(l Loc, dirObj bool) {
	k := l.cacheKey()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.shadowed) >= maxLayoutNotes {
		clear(fs.shadowed)
	}
	fs.shadowed[k] = struct{}{}
	if dirObj {
		if len(fs.dirObjs) >= maxLayoutNotes {
			clear(fs.dirObjs)
		}
		fs.dirObjs[k] = struct{}{}
	}
}

// isShadowed reports whether the directory l is known to be an object too.
func (fs *FS) isShadowed(l Loc) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, ok := fs.shadowed[l.cacheKey()]
	return ok
}

// dropDirObject deletes the directory object of l, when l is known to
// have one, once l itself went (rmdir, renamed): else the directory
// would show again, empty.
func (fs *FS) dropDirObject(ctx context.Context, st objstore.Store, l Loc) error {
	k := l.cacheKey()
	fs.mu.Lock()
	_, ok := fs.dirObjs[k]
	delete(fs.dirObjs, k)
	delete(fs.shadowed, k)
	fs.mu.Unlock()
	if !ok {
		return nil
	}
	return st.Delete(ctx, l.Key, objstore.DeleteOptions{})
}
