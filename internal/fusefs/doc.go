// Package fusefs is the only importer of go-fuse: thin nodes that turn
// kernel requests into calls on package vfs and map errors back to errnos
// with vfs.Errno. Nodes hold no state but the vfs they serve and the
// handles open on them; a node's path is computed from the go-fuse inode
// tree at each call, so renames done by go-fuse are reflected at once.
// A name keeps its node (Lookup returns the one the tree has), so the
// kernel sees one inode per file; a node that lost its name (unlink,
// rename over it) is served through the handles open on it.
//
// The end of the session (an unmount from outside, an abort) closes
// Server.Done; handles the kernel never released are released then (see
// session.go).
//
// Mount options: allow_other only when Options.AllowOther is set, and
// then default_permissions: the kernel checks access against the modes
// and owners vfs reports (NullPermissions: mode 0 is 0, owners are vfs's,
// never the mount's). nosuid and nodev always (go-fuse's defaults).
//
// Kernel caching: entries and attributes are cached for a short time
// (EntryTimeout/AttrTimeout); file contents stay in the page cache across
// opens while the object version is unchanged (FOPEN_KEEP_CACHE).
//
// Deadlocks (go-fuse fs/api.go): ferry never does file I/O on its own mount
// from the serving process, and the task is started by package supervise
// in a separate process whose binary and cwd lookups are served normally.
package fusefs
