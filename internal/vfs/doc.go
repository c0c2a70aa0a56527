// Package vfs is ferry's file-system semantics without any FUSE types:
// the namespace /<scheme>/<bucket>/<key…> over object stores, stat and
// listing with caching, open/read/write/flush/fsync through the block cache
// and the write-back stager, and rename/unlink/symlink/mkdir semantics.
// Package fusefs is a thin adapter over it; tests call it with plain Go.
//
// Errors: methods return errors that wrap either a syscall.Errno (for POSIX
// conditions such as ENOTEMPTY or EXDEV) or an objstore sentinel; package
// fusefs maps them to errnos in one table.
//
// Names: a key "a" beside keys under "a/" shows as the directory a; the
// object "a" is then shadowed (not reachable through the mount), as in
// Mountpoint for S3. Keys with empty path components ("a//b"), or "." and
// ".." components, are not shown. Other tools' layouts (Hadoop's
// "_$folder$" markers, s3fs's application/x-directory objects, MinIO's
// unlisted keys below an object) are in layout.go.
//
// Reads: directory readahead (fileahead.go, walk.go) follows each
// process's opens through the tree in find order and has the block cache
// fetch the files it is about to open; dirahead.go lists the sibling
// directories of a walk ahead.
//
// Attributes: mode, owner and times are object metadata (writeback.Attrs),
// a directory's its marker's (dirattr.go); what listings lack is known
// from this mount's uploads and HEADs, else defaulted (known.go). Special
// files (FIFOs, sockets, devices) are empty objects with their type in
// ferry-mode; a symlink target metadata cannot hold is the body.
//
// Open handles follow their file like POSIX descriptors (handles.go): a
// rename moves them, an unlink leaves them reading and writing the bytes
// they had.
//
// Lock order: FS.mu is a leaf lock (never held across a backend call);
// FS.hmu before Handle.mu, neither held across a backend call.
package vfs
