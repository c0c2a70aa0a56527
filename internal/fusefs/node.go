package fusefs

import (
	"context"
	"path"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/vfs"
)

// node is every directory, file and symlink of the mount.
type node struct {
	fs.Inode
	v *vfs.FS
	m *metrics.FUSE
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
)

func (n *node) path() string { return n.Path(nil) }

func (n *node) childPath(name string) string { return path.Join(n.Path(nil), name) }

// obs records one operation's latency and result; use as
// defer n.obs("lookup", time.Now(), &errno).
func (n *node) obs(op string, start time.Time, errno *syscall.Errno) {
	if n.m != nil {
		n.m.Observe(op, time.Since(start), *errno)
	}
}

func (n *node) newChild(ctx context.Context, a vfs.Attr, out *fuse.EntryOut) *fs.Inode {
	fillAttr(a, &out.Attr)
	return n.NewInode(ctx, &node{v: n.v, m: n.m}, fs.StableAttr{Mode: modeType(a.Kind)})
}

func modeType(k vfs.Kind) uint32 {
	switch k {
	case vfs.KindDir:
		return syscall.S_IFDIR
	case vfs.KindSymlink:
		return syscall.S_IFLNK
	}
	return syscall.S_IFREG
}

func fillAttr(a vfs.Attr, out *fuse.Attr) {
	out.Mode = modeType(a.Kind) | (a.Mode & 0o7777)
	out.Size = uint64(a.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Nlink = 1
	if a.Kind == vfs.KindDir {
		out.Nlink = 2
		out.Size = 4096
	}
	mt := a.Mtime
	if mt.IsZero() {
		mt = startTime
	}
	out.SetTimes(&mt, &mt, &mt)
}

var startTime = time.Now()

// Lookup finds a child by name.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("lookup", time.Now(), &errno)
	a, err := n.v.Getattr(ctx, n.childPath(name))
	if err != nil {
		return nil, vfs.Errno(err)
	}
	return n.newChild(ctx, a, out), 0
}

// Getattr stats the node.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.obs("getattr", time.Now(), &errno)
	a, err := n.v.Getattr(ctx, n.path())
	if err != nil {
		return vfs.Errno(err)
	}
	fillAttr(a, &out.Attr)
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
	var h *vfs.Handle
	if fh, ok := fh.(*handle); ok {
		h = fh.h
	}
	a, err := n.v.Setattr(ctx, n.path(), h, s)
	if err != nil {
		return vfs.Errno(err)
	}
	fillAttr(a, &out.Attr)
	return 0
}

// Readdir lists a directory.
func (n *node) Readdir(ctx context.Context) (_ fs.DirStream, errno syscall.Errno) {
	defer n.obs("readdir", time.Now(), &errno)
	ents, err := n.v.Readdir(ctx, n.path())
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
	h, err := n.v.Open(ctx, n.path(), vfs.FlagsFrom(flags))
	if err != nil {
		return nil, 0, vfs.Errno(err)
	}
	if h.KeepCache {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	return &handle{h: h, m: n.m}, fuseFlags, 0
}

// Create creates and opens a file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.obs("create", time.Now(), &errno)
	p := n.childPath(name)
	h, err := n.v.Create(ctx, p, mode&0o7777, vfs.FlagsFrom(flags))
	if err != nil {
		return nil, nil, 0, vfs.Errno(err)
	}
	a := vfs.Attr{Kind: vfs.KindFile, Mode: mode & 0o7777, Mtime: time.Now()}
	return n.newChild(ctx, a, out), &handle{h: h, m: n.m}, 0, 0
}

// Mkdir creates a directory (a marker object).
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("mkdir", time.Now(), &errno)
	p := n.childPath(name)
	if err := n.v.Mkdir(ctx, p); err != nil {
		return nil, vfs.Errno(err)
	}
	return n.newChild(ctx, vfs.Attr{Kind: vfs.KindDir, Mode: 0o755}, out), 0
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.obs("rmdir", time.Now(), &errno)
	return vfs.Errno(n.v.Rmdir(ctx, n.childPath(name)))
}

// Unlink removes a file or symlink.
func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.obs("unlink", time.Now(), &errno)
	return vfs.Errno(n.v.Unlink(ctx, n.childPath(name)))
}

// Rename moves a name.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.obs("rename", time.Now(), &errno)
	to := path.Join(newParent.EmbeddedInode().Path(nil), newName)
	fl := vfs.RenameFlags{NoReplace: flags&1 != 0, Exchange: flags&2 != 0} // RENAME_NOREPLACE, RENAME_EXCHANGE
	return vfs.Errno(n.v.Rename(ctx, n.childPath(name), to, fl))
}

// Symlink creates a symlink.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.obs("symlink", time.Now(), &errno)
	if err := n.v.Symlink(ctx, n.childPath(name), target); err != nil {
		return nil, vfs.Errno(err)
	}
	a := vfs.Attr{Kind: vfs.KindSymlink, Size: int64(len(target)), Symlink: target, Mode: 0o777, Mtime: time.Now()}
	return n.newChild(ctx, a, out), 0
}

// Readlink reads a symlink.
func (n *node) Readlink(ctx context.Context) (_ []byte, errno syscall.Errno) {
	defer n.obs("readlink", time.Now(), &errno)
	t, err := n.v.Readlink(ctx, n.path())
	if err != nil {
		return nil, vfs.Errno(err)
	}
	return []byte(t), 0
}

// Link refuses hard links.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

// Statfs reports constant large figures.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s := n.v.StatFS()
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bfree
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize = s.Bsize, s.Bsize
	out.NameLen = 1024
	return 0
}
