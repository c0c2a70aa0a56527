package vfs

import (
	"context"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Caller is the process making a request: what it creates is its own,
// and what it opens feeds its directory readahead (fileahead.go).
type Caller struct{ Uid, Gid, Pid uint32 }

type callerKey struct{}

// WithCaller returns ctx carrying c, the caller of the request.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// caller returns the caller ctx carries, else the mount's owner.
func (fs *FS) caller(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Uid: fs.opts.Uid, Gid: fs.opts.Gid}
}

// newAttrs is the attributes of the name l the caller creates with the
// permission bits mode (the kernel applied the umask), a directory when
// dir: owned by the caller, times now. In a directory with the set-
// group-ID bit, the group is the directory's and a new directory gets
// the bit too; a file's own set-group-ID bit then goes unless the caller
// is root or of that group (Linux's inode_init_owner; FUSE tells the
// caller's user and group only, not its other groups).
func (fs *FS) newAttrs(ctx context.Context, l Loc, mode uint32, dir bool) writeback.Attrs {
	c := fs.caller(ctx)
	a := writeback.Attrs{Mode: mode & 0o7777, HasMode: true, Uid: c.Uid, Gid: c.Gid, HasOwner: true}
	par, _ := l.parent()
	if pa, err := fs.dirAttrOf(ctx, par); err == nil && pa.Mode&syscall.S_ISGID != 0 {
		a.Gid = pa.Gid
		const sgidExec = syscall.S_ISGID | syscall.S_IXGRP
		switch {
		case dir:
			a.Mode |= syscall.S_ISGID
		case a.Mode&sgidExec == sgidExec && c.Uid != 0 && c.Gid != pa.Gid:
			a.Mode &^= syscall.S_ISGID
		}
	}
	return a
}

// noteEntryChanged records that the name l was created or removed: the
// modification and change times of its directory are now.
func (fs *FS) noteEntryChanged(l Loc) {
	par, _ := l.parent()
	fs.noteDirChanged(par)
}

// Mknod creates the file p of the type and permission bits in mode: an
// empty regular file, or a FIFO, socket, or character or block device
// (rdev), stored as an empty object whose metadata holds the type (the
// kernel refuses devices to callers without CAP_MKNOD, and ferry's mount
// is nodev: they cannot be opened through it).
func (fs *FS) Mknod(ctx context.Context, p string, mode, rdev uint32) error {
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
	if _, err := fs.getattr(ctx, l); err == nil {
		return syscall.EEXIST
	} else if !errIs(err, syscall.ENOENT) && !errIs(err, objstore.ErrNotFound) {
		return err
	}
	if _, err := fs.store(ctx, l); err != nil {
		return err
	}
	a := fs.newAttrs(ctx, l, mode&0o7777, false)
	typ := mode & syscall.S_IFMT
	switch typ {
	case 0, syscall.S_IFREG:
		f, err := fs.deps.Writeback.CreateWith(l.target(), a)
		if err != nil {
			return err
		}
		f.Acquire()
		if err := f.Release(); err != nil { // closed: queued for upload
			return err
		}
		fs.noteCreated(l, meta.KindFile)
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
		a.Mode |= typ
		if typ == syscall.S_IFCHR || typ == syscall.S_IFBLK {
			a.Rdev = rdev
		}
		if err := fs.deps.Writeback.Node(l.target(), "", a); err != nil {
			return err
		}
		fs.noteCreated(l, kindOfMode(typ))
	default:
		return syscall.EINVAL
	}
	fs.noteEntryChanged(l)
	return nil
}
