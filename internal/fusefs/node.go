package fusefs

import (
	"context"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/vfs"
)

// node is every directory, file and symlink of the mount. One name has
// one node while it exists (Lookup returns the node the tree already has),
// so that the kernel sees one inode per file; renames move the node
// (go-fuse), and an unlinked node lives on for the descriptors open on it.
type node struct {
	fs.Inode
	v  *vfs.FS
	m  *metrics.FUSE
	pt *passthrough // the mount's; nil without passthrough
	s  *session     // the mount's session, shared by all its nodes

	mu     sync.Mutex           // guards the fields below
	open   map[*handle]struct{} // handles open on this node
	cached int                  // of them, served through the page cache (passthrough.go)
	bk     *backing             // the backing file of its passthrough and direct opens, if any
	kin    *kin                 // the other nodes of its name since a split, if any (kin.go)
}

var (
	_ fs.NodeFsyncer     = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeReaddirer   = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeMkdirer     = (*node)(nil)
	_ fs.NodeRmdirer     = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
	_ fs.NodeSymlinker   = (*node)(nil)
	_ fs.NodeReadlinker  = (*node)(nil)
	_ fs.NodeLinker      = (*node)(nil)
	_ fs.NodeStatfser    = (*node)(nil)
	_ fs.NodeMknoder     = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)

// withCaller returns ctx carrying the calling process's user, group and
// pid for vfs (the owner of what it creates; whose opens predict its next
// ones).
func withCaller(ctx context.Context) context.Context {
	if c, ok := fuse.FromContext(ctx); ok {
		return vfs.WithCaller(ctx, vfs.Caller{Uid: c.Uid, Gid: c.Gid, Pid: c.Pid})
	}
	return ctx
}

// path returns the node's mount-relative path, and false when the node
// has no name any more (it was unlinked, or a rename replaced it).
func (n *node) path() (string, bool) {
	var segs []string
	in := &n.Inode
	for !in.IsRoot() {
		name, par := in.Parent()
		if par == nil {
			return "", false
		}
		segs = append(segs, name)
		in = par
	}
	slices.Reverse(segs)
	return strings.Join(segs, "/"), true
}

// childPath returns the path of name in the directory n.
func (n *node) childPath(name string) (string, bool) {
	p, ok := n.path()
	return path.Join(p, name), ok
}

// handleOf returns fh as ferry's handle, else any handle open on n (the
// kernel sends no handle with a stat of an open, unlinked file), else nil.
func (n *node) handleOf(fh fs.FileHandle) *handle {
	if h, ok := fh.(*handle); ok {
		return h
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for h := range n.open {
		return h
	}
	return nil
}

// obs records one operation's latency and result; use as
// defer n.obs("lookup", time.Now(), &errno).
func (n *node) obs(op string, start time.Time, errno *syscall.Errno) {
	if n.m != nil {
		n.m.Observe(op, time.Since(start), *errno)
	}
}

// newChild returns a new node for a name that did not exist (create,
// mkdir, symlink); go-fuse numbers its inode.
func (n *node) newChild(ctx context.Context, a vfs.Attr, out *fuse.EntryOut) (*fs.Inode, *node) {
	fillAttr(a, &out.Attr)
	ch := &node{v: n.v, m: n.m, pt: n.pt, s: n.s}
	return n.NewInode(ctx, ch, fs.StableAttr{Mode: modeType(a.Kind)}), ch
}

// modeType is the S_IFMT type bits of a name of kind k.
func modeType(k vfs.Kind) uint32 { return vfs.ModeType(k) }

// fillAttr fills out from a. st_nlink is 1 (0 once unlinked), for
// directories too: ferry does not count subdirectories (as btrfs).
func fillAttr(a vfs.Attr, out *fuse.Attr) {
	out.Mode = modeType(a.Kind) | (a.Mode & 0o7777)
	out.Size = uint64(a.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Nlink = 1
	if a.Unlinked {
		out.Nlink = 0
	}
	if a.Kind == vfs.KindDir {
		out.Size = 4096
	}
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Rdev = a.Rdev
	at, mt, ct := orStart(a.Atime), orStart(a.Mtime), orStart(a.Ctime)
	out.SetTimes(&at, &mt, &ct)
}

// orStart is t, or the mount's start time for an unknown time.
func orStart(t time.Time) time.Time {
	if t.IsZero() {
		return startTime
	}
	return t
}

var startTime = time.Now()

// Lookup finds a child by name.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("lookup", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	a, err := n.v.Getattr(ctx, p)
	if err != nil {
		return nil, vfs.Errno(err)
	}
	// The name keeps its inode: a new one would split the file in two
	// for the kernel (an open descriptor and the path would disagree).
	if a.Volatile {
		out.SetAttrTimeout(volatileTTL)
	}
	if ch := n.GetChild(name); ch != nil && ch.Mode() == modeType(a.Kind) {
		fillAttr(a, &out.Attr)
		if c, ok := ch.Operations().(*node); ok && c.hasLiveKin() {
			out.SetAttrTimeout(volatileTTL)
		}
		return ch, 0
	}
	ch, nn := n.newChild(ctx, a, out)
	if n.s.kins.has(p) {
		n.s.kins.join(p, nn) // the name was split (kin.go)
		out.SetAttrTimeout(volatileTTL)
	}
	return ch, 0
}

// Getattr stats the node: through a handle open on it when the kernel
// names one or the node has lost its name, else by path.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.obs("getattr", time.Now(), &errno)
	p, linked := n.path()
	h, given := fh.(*handle)
	if !given && !linked {
		h = n.handleOf(nil)
	}
	var (
		a   vfs.Attr
		err error
	)
	switch {
	case h != nil:
		a, err = h.h.Attr(ctx)
	case !linked:
		return syscall.ENOENT
	default:
		a, err = n.v.Getattr(ctx, p)
	}
	if err != nil {
		return vfs.Errno(err)
	}
	fillAttr(a, &out.Attr)
	if a.Volatile || n.hasLiveKin() {
		out.SetTimeout(volatileTTL)
	}
	return 0
}

// Setattr truncates, chmods or touches the node.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.obs("setattr", time.Now(), &errno)
	var s vfs.SetAttr
	if sz, ok := in.GetSize(); ok {
		v := int64(sz)
		s.Size = &v
	}
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if mt, ok := in.GetMTime(); ok {
		s.Mtime = &mt
	}
	if at, ok := in.GetATime(); ok {
		s.Atime = &at
	}
	if uid, ok := in.GetUID(); ok {
		s.Uid = &uid
	}
	if gid, ok := in.GetGID(); ok {
		s.Gid = &gid
	}
	var h *vfs.Handle
	p, linked := n.path()
	if hh := n.handleOf(fh); hh != nil && (fh != nil || !linked) {
		h = hh.h
	} else if !linked {
		return syscall.ENOENT
	}
	a, err := n.v.Setattr(ctx, p, h, s)
	n.notifyKin()
	if err != nil {
		return vfs.Errno(err)
	}
	fillAttr(a, &out.Attr)
	if a.Volatile || n.hasLiveKin() {
		out.SetTimeout(volatileTTL)
	}
	return 0
}

// Readdir lists a directory.
func (n *node) Readdir(ctx context.Context) (_ fs.DirStream, errno syscall.Errno) {
	defer n.obs("readdir", time.Now(), &errno)
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	ents, err := n.v.Readdir(ctx, p)
	if err != nil {
		return nil, vfs.Errno(err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, fuse.DirEntry{Name: e.Name, Mode: modeType(e.Kind)})
	}
	return fs.NewListDirStream(out), 0
}

// Open opens an existing file.
func (n *node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer n.obs("open", time.Now(), &errno)
	if vfs.FlagsFrom(flags).Write && n.hasCacheBacking() {
		n.split(ctx) // see passthrough.go
		return nil, 0, syscall.ESTALE
	}
	p, ok := n.path()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	h, err := n.v.Open(withCaller(ctx), p, vfs.FlagsFrom(flags))
	if err != nil {
		return nil, 0, vfs.Errno(err)
	}
	if h.KeepCache {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	fh := &handle{h: h, m: n.m, n: n, write: vfs.FlagsFrom(flags).Write}
	fuseFlags, errno = n.attach(ctx, fh, flags, fuseFlags)
	if errno != 0 {
		h.Release() // never attached
		return nil, 0, errno
	}
	return fh, fuseFlags, 0
}

// Create creates and opens a file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.obs("create", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return nil, nil, 0, syscall.ENOENT
	}
	h, err := n.v.Create(withCaller(ctx), p, mode&0o7777, vfs.FlagsFrom(flags))
	if err != nil {
		return nil, nil, 0, vfs.Errno(err)
	}
	a, _ := h.Attr(ctx) // the new file's: no error
	ino, ch := n.newChild(ctx, a, out)
	fh := &handle{h: h, m: n.m, n: ch, write: true}
	fuseFlags, errno := ch.attach(ctx, fh, flags, 0)
	if errno != 0 {
		h.Release() // never attached
		return nil, nil, 0, errno
	}
	return ino, fh, fuseFlags, 0
}

// Mkdir creates a directory (a marker object).
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("mkdir", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if err := n.v.MkdirMode(withCaller(ctx), p, mode&0o7777); err != nil {
		return nil, vfs.Errno(err)
	}
	return n.newCreated(ctx, p, vfs.KindDir, mode, out)
}

// newCreated returns the node of p, a name just created (of kind k),
// with its attributes as vfs has them; should they not be there (another
// client replaced the name meanwhile), with those the caller asked for.
func (n *node) newCreated(ctx context.Context, p string, k vfs.Kind, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.v.Getattr(ctx, p)
	if err != nil || a.Kind != k {
		now := time.Now()
		a = vfs.Attr{Kind: k, Mode: mode & 0o7777, Atime: now, Mtime: now, Ctime: now}
		if c, ok := fuse.FromContext(ctx); ok {
			a.Uid, a.Gid = c.Uid, c.Gid
		}
	}
	ino, _ := n.newChild(ctx, a, out)
	return ino, 0
}

// Mknod creates a regular file, FIFO, socket or device (an empty object
// whose metadata holds its type).
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("mknod", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if err := n.v.Mknod(withCaller(ctx), p, mode, dev); err != nil {
		return nil, vfs.Errno(err)
	}
	k := vfs.KindFile
	for _, c := range []vfs.Kind{vfs.KindFifo, vfs.KindSocket, vfs.KindChar, vfs.KindBlock} {
		if modeType(c) == mode&syscall.S_IFMT {
			k = c
		}
	}
	return n.newCreated(ctx, p, k, mode, out)
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.obs("rmdir", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return syscall.ENOENT
	}
	return vfs.Errno(n.v.Rmdir(ctx, p))
}

// Unlink removes a file or symlink.
func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.obs("unlink", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return syscall.ENOENT
	}
	return vfs.Errno(n.v.Unlink(ctx, p))
}

// Rename moves a name.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.obs("rename", time.Now(), &errno)
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, ok1 := n.childPath(name)
	to, ok2 := np.childPath(newName)
	if !ok1 || !ok2 {
		return syscall.ENOENT
	}
	fl := vfs.RenameFlags{NoReplace: flags&1 != 0, Exchange: flags&2 != 0} // RENAME_NOREPLACE, RENAME_EXCHANGE
	return vfs.Errno(n.v.Rename(ctx, from, to, fl))
}

// Symlink creates a symlink.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("symlink", time.Now(), &errno)
	p, ok := n.childPath(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if err := n.v.Symlink(withCaller(ctx), p, target); err != nil {
		return nil, vfs.Errno(err)
	}
	return n.newCreated(ctx, p, vfs.KindSymlink, 0o777, out)
}

// Readlink reads a symlink.
func (n *node) Readlink(ctx context.Context) (_ []byte, errno syscall.Errno) {
	defer n.obs("readlink", time.Now(), &errno)
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	t, err := n.v.Readlink(ctx, p)
	if err != nil {
		return nil, vfs.Errno(err)
	}
	return []byte(t), 0
}

// Fsync makes the node durable: through the handle when the kernel gives
// one (fsync of a file), else by path (fsync of a directory: the files
// staged in it).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) (errno syscall.Errno) {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	defer n.obs("fsync", time.Now(), &errno)
	p, ok := n.path()
	if !ok {
		if h := n.handleOf(nil); h != nil {
			return vfs.Errno(h.h.Fsync(ctx))
		}
		return 0 // an unlinked node has nothing to make durable
	}
	return vfs.Errno(n.v.Fsync(ctx, p))
}

// Link refuses hard links.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

// Statfs reports constant large figures, and the name length ferry
// accepts.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s := n.v.StatFS()
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bfree
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize = s.Bsize, s.Bsize
	out.NameLen = s.NameMax
	return 0
}
