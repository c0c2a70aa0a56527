package vfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

var ioEOF = io.EOF

// Handle is one open file. Reads see the newest local writes: a handle
// opened on a clean object switches to the dirty copy when one appears.
type Handle struct {
	fs *FS
	wf *writeback.File // the dirty file (write handles, or reads of dirty files); immutable
	// write: opened for writing; appends: with O_APPEND; immutable.
	write, appends bool
	attr           Attr // the file's attributes at open (clean handles); immutable

	// mu guards the fields below (see handles.go).
	mu       sync.Mutex
	loc      Loc             // the file's current name
	unlinked bool            // the file lost its name (unlink, rename over it)
	rd       *block.Reader   // clean reads
	ref      block.Ref       // what rd reads
	old      []*block.Reader // readers replaced by a rename; closed at Release
	// follow is the dirty file a clean handle found at its name (the same
	// file, written through another handle): it reads from it from then
	// on (see dirty); held: it holds a reference on it (taken when the
	// name went, released at Release).
	follow *writeback.File
	held   bool
	// pt: the kernel serves this handle's reads from the cache file of
	// the version it opened (passthrough; see keepSnapshots).
	pt bool
	// ext: the kernel may write wf's staging file for this handle
	// (writeback.File.Backing); ended at Release.
	ext bool

	// KeepCache tells the kernel it may keep its page cache for this file:
	// the version is the one seen at the previous open.
	KeepCache bool
	// Size is the file's size at open.
	Size int64
}

// OpenFlags are the open(2) flags vfs looks at.
type OpenFlags struct {
	Write bool // O_WRONLY or O_RDWR
	Trunc bool // O_TRUNC
	Excl  bool // O_EXCL (Create only)
	// Append: O_APPEND. Each write lands at the file's end as ferry
	// knows it, whatever the offset given: the kernel's comes from its
	// cached size, which another node's writer or truncate may have
	// moved since (writeback.File.AppendAt).
	Append bool
}

// FlagsFrom converts open(2) flags.
func FlagsFrom(flags uint32) OpenFlags {
	acc := flags & syscall.O_ACCMODE
	return OpenFlags{
		Write:  acc == syscall.O_WRONLY || acc == syscall.O_RDWR,
		Trunc:  flags&syscall.O_TRUNC != 0,
		Excl:   flags&syscall.O_EXCL != 0,
		Append: flags&syscall.O_APPEND != 0,
	}
}

// Open opens the existing file p.
func (fs *FS) Open(ctx context.Context, p string, fl OpenFlags) (*Handle, error) {
	l, err := Parse(p)
	if err != nil {
		return nil, err
	}
	if l.Key == "" {
		return nil, syscall.EISDIR
	}
	t := l.target()
	if f := fs.deps.Writeback.Get(t); f != nil {
		if f.Symlink() != "" {
			return nil, syscall.ELOOP
		}
		if f.Mode()&syscall.S_IFMT != 0 {
			return nil, syscall.ENXIO // a special file: the kernel opens it itself
		}
		f.Acquire()
		if fl.Write && fl.Trunc {
			if err := f.Truncate(0); err != nil {
				f.Release()
				return nil, err
			}
		}
		return fs.newHandle(&Handle{loc: l, wf: f, write: fl.Write, appends: fl.Append, Size: f.Size(), KeepCache: !fl.Trunc}), nil
	}
	info, kind, err := fs.revalidate(ctx, l)
	if err != nil {
		return nil, err
	}
	switch kind {
	case meta.KindDir:
		return nil, syscall.EISDIR
	case meta.KindSymlink:
		return nil, syscall.ELOOP
	case meta.KindFifo, meta.KindSocket, meta.KindChar, meta.KindBlock:
		return nil, syscall.ENXIO // the kernel opens these itself
	}
	if fl.Write {
		fs.keepSnapshots(ctx, l)
		// The file keeps the object's attributes: metadata a listing lacked.
		if info, err = fs.fullInfo(ctx, l, info); err != nil {
			return nil, err
		}
		var f *writeback.File
		if fl.Trunc || info.Size == 0 {
			f, err = fs.deps.Writeback.CreateWith(t, keptAttrs(info, fl.Trunc))
		} else {
			f, err = fs.deps.Writeback.OpenBase(ctx, t, info)
		}
		if err != nil {
			return nil, err
		}
		f.Acquire()
		fs.noteCreated(l, meta.KindFile)
		fs.adoptAt(l, f)
		return fs.newHandle(&Handle{loc: l, wf: f, write: true, appends: fl.Append, Size: f.Size()}), nil
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return nil, err
	}
	fs.noteOpen(ctx, l) // directory readahead: the files it will open next
	fs.mu.Lock()
	keep := fs.seen[l.cacheKey()] == info.Version
	fs.seen[l.cacheKey()] = info.Version
	fs.mu.Unlock()
	ref := block.Ref{Store: st, StoreID: l.Scheme + "/" + l.Bucket, Key: l.Key, Version: info.Version, Size: info.Size}
	rd := fs.deps.Blocks.Open(ref)
	return fs.newHandle(&Handle{loc: l, rd: rd, ref: ref, attr: fs.entryAttr(meta.KindFile, info), KeepCache: keep, Size: info.Size}), nil
}

// newHandle completes h and registers it under its name.
func (fs *FS) newHandle(h *Handle) *Handle {
	h.fs = fs
	fs.track(h)
	return h
}

// revalidate implements close-to-open: a fresh stat-cache entry is
// trusted, otherwise the object is stat'ed again.
func (fs *FS) revalidate(ctx context.Context, l Loc) (objstore.ObjectInfo, meta.Kind, error) {
	if e, ok := fs.deps.Meta.Stat(l.cacheKey()); ok && e.Kind != meta.KindNone && e.Kind != meta.KindDir {
		return e.Info, e.Kind, nil
	}
	// A fresh listing of the parent is as good as a stat for a non-empty
	// object (an empty one may be a symlink).
	par, name := l.parent()
	if ls, ok := fs.deps.Meta.List(par.cacheKey()); ok {
		if e, found := ls.Has(name); found && e.Kind == meta.KindFile && !maybeNode(e.Info) && e.Info.Version != "" {
			return e.Info, meta.KindFile, nil
		}
	}
	st, err := fs.store(ctx, l)
	if err != nil {
		return objstore.ObjectInfo{}, 0, err
	}
	info, err := st.Stat(ctx, l.Key)
	if err != nil {
		if errIs(err, objstore.ErrNotFound) {
			// Maybe a directory (a prefix without a marker).
			a, aerr := fs.getattr(ctx, l)
			if aerr == nil && a.Kind == meta.KindDir {
				return objstore.ObjectInfo{}, meta.KindDir, nil
			}
			return objstore.ObjectInfo{}, 0, syscall.ENOENT
		}
		fs.logErr("open", l, err)
		return objstore.ObjectInfo{}, 0, err
	}
	kind := kindOf(info)
	fs.deps.Meta.PutStat(l.cacheKey(), kind, info)
	return info, kind, nil
}

// Create creates (or truncates) the file p and opens it for writing.
func (fs *FS) Create(ctx context.Context, p string, mode uint32, fl OpenFlags) (*Handle, error) {
	l, err := Parse(p)
	if err != nil {
		return nil, err
	}
	if l.Key == "" {
		return nil, syscall.EISDIR
	}
	if err := refuseHidden(l); err != nil {
		return nil, err
	}
	if fl.Excl {
		if _, err := fs.getattr(ctx, l); err == nil {
			return nil, syscall.EEXIST
		}
	}
	if _, err := fs.store(ctx, l); err != nil {
		return nil, err
	}
	f, err := fs.deps.Writeback.CreateWith(l.target(), fs.newAttrs(ctx, l, mode, false))
	if err != nil {
		return nil, err
	}
	f.Acquire()
	fs.noteCreated(l, meta.KindFile)
	fs.noteEntryChanged(l)
	return fs.newHandle(&Handle{loc: l, wf: f, write: fl.Write, appends: fl.Append}), nil
}

// Read reads at off. It returns fewer bytes only at the end of the file.
func (h *Handle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	f := h.dirty()
	l, _ := h.where()
	var n int
	var err error
	if f != nil {
		n, err = readFull(ctx, f.ReadAt, p, off)
	} else {
		n, err = readFull(ctx, h.reader().ReadAt, p, off)
	}
	if err == io.EOF {
		err = nil
	}
	if errIs(err, objstore.ErrNotFound) {
		// The object under the descriptor was deleted by another client:
		// read(2) has no ENOENT, and the data is gone, so ESTALE.
		h.fs.log.Warn(fmt.Sprintf("read %s failed: the object was deleted while open", l.URL()),
			"op", "read", "path", l.URL(), "err", err.Error())
		return n, fmt.Errorf("read %s: %w", l.URL(), syscall.ESTALE)
	}
	if err != nil {
		h.fs.logErr("read", l, err)
	}
	return n, err
}

func readFull(ctx context.Context, read func(context.Context, []byte, int64) (int, error), p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := read(ctx, p[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
	}
	return n, nil
}

// CachedFile returns an open cache file and offset that hold the file's
// range [off, off+n), n clipped at the end of the object the handle reads
// now (not its size at open: a rename may have moved it to a rewritten
// version), when the block cache has all of it, so the FUSE layer can hand
// the kernel a file descriptor instead of copying.
func (h *Handle) CachedFile(off int64, n int) (f *os.File, fileOff int64, m int, ok bool) {
	h.mu.Lock()
	rd, size := h.rd, h.ref.Size
	h.mu.Unlock()
	if rd == nil || off >= size || h.dirty() != nil {
		return nil, 0, 0, false
	}
	m = int(min(int64(n), size-off))
	f, fileOff, ok = rd.CachedFile(off, int64(m))
	return f, fileOff, m, ok
}

// Backing returns a read-only descriptor of a cache file that holds the
// clean object h reads, for the FUSE layer to hand the kernel
// (passthrough), and the identity of its bytes (two handles with the same
// id read the same bytes): a whole, verified file, or with cold true and
// cold passthrough on, possibly a sparse one the block cache fills as the
// kernel asks (partial; see block.Reader.Backing: it must be made whole,
// CompleteBacking, before anything may map it). ok is false for a handle
// open for writing, a file with local changes, an object that cannot be
// passed through. The caller closes f.
func (h *Handle) Backing(cold bool) (f *os.File, id string, partial, ok bool) {
	h.mu.Lock()
	rd := h.rd
	h.mu.Unlock()
	if h.wf != nil {
		// A dirty file whose staging file is its whole content: the
		// kernel reads (and, for a writer, writes) that file itself.
		f, key, ok := h.wf.Backing(h.write)
		if ok && h.write {
			h.mu.Lock()
			if h.ext { // one external writer per handle
				h.wf.EndExternal()
			}
			h.ext = true
			h.mu.Unlock()
		}
		return f, key, false, ok
	}
	if rd == nil || h.dirty() != nil {
		return nil, "", false, false
	}
	return rd.Backing(cold)
}

// CompleteBacking makes the cache file h passes through whole, when it
// was handed out cold (see Backing).
func (h *Handle) CompleteBacking(ctx context.Context) error {
	h.mu.Lock()
	rd := h.rd
	h.mu.Unlock()
	if rd == nil {
		return nil
	}
	if err := rd.CompleteBacking(ctx); err != nil {
		l, _ := h.where()
		h.fs.logErr("complete cache file", l, err)
		return err
	}
	return nil
}

// FreezeExternal stops the kernel's writes into the staging file of a
// writer that passes through, whose release ferry makes in the kernel's
// place (see writeback.File.FreezeExternal). A no-op for other handles.
func (h *Handle) FreezeExternal() {
	h.mu.Lock()
	ext := h.ext
	h.mu.Unlock()
	if ext {
		h.wf.FreezeExternal()
	}
}

// NotePassthrough records that the kernel serves h's reads from the file
// Backing returned (see block.Reader.NotePassthrough).
func (h *Handle) NotePassthrough() {
	h.mu.Lock()
	rd := h.rd
	h.pt = true
	h.mu.Unlock()
	if rd != nil {
		rd.NotePassthrough()
	}
}

// Write writes at off (the file must be open for writing).
func (h *Handle) Write(p []byte, off int64) (int, error) {
	if h.wf == nil {
		return 0, syscall.EBADF
	}
	write := h.wf.WriteAt
	if h.appends {
		write = h.wf.AppendAt
	}
	n, err := write(p, off)
	if err != nil && !isErrno(err) {
		l, _ := h.where()
		h.fs.logErr("write", l, err)
	}
	return n, err
}

// Fsync makes the file durable in the bucket.
func (h *Handle) Fsync(ctx context.Context) error {
	l, _ := h.where()
	if h.wf == nil {
		if f := h.dirty(); f != nil {
			return f.Sync(ctx)
		}
		return nil
	}
	err := h.wf.Sync(ctx)
	h.fs.logErr("fsync", l, err)
	return err
}

// Flush is a close(2) of a descriptor of the handle: a written file is
// journaled as closed before close returns (the kernel's release comes
// later, asynchronously), so that a ferry killed meanwhile still uploads
// it at its next start. The returned error is a staging error.
func (h *Handle) Flush() error {
	if h.wf == nil {
		return nil
	}
	err := h.wf.Flush()
	h.fs.logErr("flush", h.loc, err)
	return err
}

// Release closes the handle. For a written file, the data is staged on
// local disk and queued for upload; the returned error is a staging error.
func (h *Handle) Release() error {
	h.fs.untrack(h)
	h.mu.Lock()
	rds := append(h.old, h.rd)
	h.rd, h.old = nil, nil
	var follow *writeback.File
	if h.held {
		follow = h.follow
	}
	h.follow, h.held = nil, false
	ext := h.ext
	h.ext = false
	h.mu.Unlock()
	if ext {
		h.wf.EndExternal()
	}
	for _, rd := range rds {
		if rd != nil {
			rd.Close()
		}
	}
	if follow != nil {
		_ = follow.Release() // its writers report staging errors
	}
	if h.wf != nil {
		return h.wf.Release()
	}
	return nil
}
