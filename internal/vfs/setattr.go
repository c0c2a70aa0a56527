package vfs

import (
	"context"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// SetAttr is what a setattr changes (nil: unchanged).
type SetAttr struct {
	Size         *int64
	Mode         *uint32 // permission bits
	Uid, Gid     *uint32
	Atime, Mtime *time.Time
}

// meta reports whether s changes more than the size.
func (s SetAttr) meta() bool {
	return s.Mode != nil || s.Uid != nil || s.Gid != nil || s.Atime != nil || s.Mtime != nil
}

// apply applies s (but the size) to a; a change sets the change time to
// now.
func (s SetAttr) apply(a *Attr, now time.Time) {
	if s.Mode != nil {
		a.Mode = *s.Mode & 0o7777
	}
	if s.Uid != nil {
		a.Uid = *s.Uid
	}
	if s.Gid != nil {
		a.Gid = *s.Gid
	}
	if s.Atime != nil {
		a.Atime = *s.Atime
	}
	if s.Mtime != nil {
		a.Mtime = *s.Mtime
	}
	if s.meta() {
		a.Ctime = now
	}
}

// applyTo applies s (but the size) to w, the attributes of a file.
func (s SetAttr) applyTo(w *writeback.Attrs, owner Attr) {
	if s.Mode != nil {
		w.Mode = w.Mode&syscall.S_IFMT | *s.Mode&0o7777
	}
	if s.Uid != nil || s.Gid != nil {
		// The owner not changed is the one shown (maybe the default).
		w.Uid, w.Gid, w.HasOwner = owner.Uid, owner.Gid, true
		if s.Uid != nil {
			w.Uid = *s.Uid
		}
		if s.Gid != nil {
			w.Gid = *s.Gid
		}
	}
	if s.Atime != nil {
		w.Atime = *s.Atime
	}
	if s.Mtime != nil {
		w.Mtime = *s.Mtime
	}
}

// Setattr applies s to p (through h when the caller has it open): the
// size of a file; the mode, owner and times of anything. Changes to an
// object not written in this mount rewrite its metadata (a server-side
// copy onto itself, through writeback); a directory's go to its marker.
func (fs *FS) Setattr(ctx context.Context, p string, h *Handle, s SetAttr) (Attr, error) {
	if h != nil && h.wf != nil {
		a, err := fs.setFileAttr(h.wf, s)
		if _, linked := h.where(); !linked {
			a.Unlinked = true
		}
		return a, err
	}
	if h != nil {
		l, linked := h.where()
		if !linked {
			// An unlinked file open read-only: nothing to change.
			a := h.attr
			a.Unlinked = true
			return a, nil
		}
		p = l.String()
	}
	l, err := Parse(p)
	if err != nil {
		return Attr{}, err
	}
	if l.Key == "" {
		if _, err := fs.getattr(ctx, l); err != nil {
			return Attr{}, err
		}
		return fs.setattrDir(ctx, l, s)
	}
	if f := fs.deps.Writeback.Get(l.target()); f != nil {
		return fs.setFileAttr(f, s)
	}
	a, err := fs.getattr(ctx, l)
	if err != nil {
		return Attr{}, err
	}
	switch a.Kind {
	case meta.KindDir:
		return fs.setattrDir(ctx, l, s)
	case meta.KindFile:
	default:
		if s.Size != nil {
			return Attr{}, syscall.EINVAL
		}
		return fs.setattrNode(ctx, l, a, s)
	}
	if s.Size == nil && !s.meta() {
		return a, nil
	}
	// A clean object: open it for writing (its bytes stay in the bucket
	// unless written) and change it as a dirty file.
	fl := OpenFlags{Write: true}
	if s.Size != nil && *s.Size == 0 {
		fl.Trunc = true
	}
	hh, err := fs.Open(ctx, p, fl)
	if err != nil {
		return Attr{}, err
	}
	defer hh.Release()
	return fs.setFileAttr(hh.wf, s)
}

// setFileAttr applies s to the dirty file f.
func (fs *FS) setFileAttr(f *writeback.File, s SetAttr) (Attr, error) {
	if s.Size != nil {
		if f.Symlink() != "" || f.Mode()&syscall.S_IFMT != 0 {
			return Attr{}, syscall.EINVAL
		}
		if err := f.Truncate(*s.Size); err != nil {
			return Attr{}, err
		}
	}
	if s.meta() {
		shown := fs.fileAttr(f)
		f.UpdateAttrs(func(w *writeback.Attrs) { s.applyTo(w, shown) })
	}
	return fs.fileAttr(f), nil
}

// setattrNode applies s to the clean symlink or special file l (whose
// attributes are a): the object is written again with the new ones.
func (fs *FS) setattrNode(ctx context.Context, l Loc, a Attr, s SetAttr) (Attr, error) {
	if !s.meta() {
		return a, nil
	}
	w := attrsOf(a)
	s.applyTo(&w, a)
	w.Ctime = time.Time{} // now
	if a.Kind != meta.KindSymlink {
		w.Mode |= modeTypeOf(a.Kind)
	}
	if err := fs.deps.Writeback.Node(l.target(), a.Symlink, w); err != nil {
		return Attr{}, err
	}
	// As after a create: the parent's cached listing shows the old
	// version's attributes, and the new one may land (and writeback
	// forget it) before the next lookup.
	fs.noteCreated(l, a.Kind)
	return fs.getattr(ctx, l)
}

// attrsOf is the writeback attributes of a (permission bits only).
func attrsOf(a Attr) writeback.Attrs {
	w := writeback.Attrs{
		Mode: a.Mode & 0o7777, HasMode: true, Uid: a.Uid, Gid: a.Gid, HasOwner: true,
		Rdev: a.Rdev, Mtime: a.Mtime, Ctime: a.Ctime,
	}
	if !a.Atime.Equal(a.Mtime) {
		w.Atime = a.Atime
	}
	return w
}

// modeTypeOf is the type bits of a special file's kind (0 for others).
func modeTypeOf(k meta.Kind) uint32 {
	switch k {
	case meta.KindFifo, meta.KindSocket, meta.KindChar, meta.KindBlock:
		return ModeType(k)
	}
	return 0
}

// keptAttrs is the attributes of a file made anew over the object info
// (an open for writing that truncates it, or of an empty object): its
// mode and owner; its times unless truncated (then now).
func keptAttrs(info objstore.ObjectInfo, trunc bool) writeback.Attrs {
	w := writeback.ParseAttrs(info.Metadata)
	if !w.HasMode {
		w.Mode = 0o644
	}
	w.Mode &= 0o7777
	w.Rdev = 0
	if trunc {
		w.Mtime, w.Ctime = time.Time{}, time.Time{}
	} else if w.Mtime.IsZero() {
		w.Mtime = info.ModTime
	}
	return w
}
