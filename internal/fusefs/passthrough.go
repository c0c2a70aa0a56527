package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ferry-fs/ferry/internal/metrics"
)

// FUSE passthrough (Linux 6.9+): an open of a file whose bytes are all in
// the block cache is answered with FOPEN_PASSTHROUGH and a backing file
// (the cache's data file, registered with the kernel): the kernel then
// serves reads, splice and mmap from it without asking ferry, and every
// ferry on the node that passes through the same cache file shares one
// page cache of it.
//
// The kernel's rules (fs/fuse/iomode.c): all passthrough opens of an inode
// name one backing file; while an inode has opens served through the page
// cache (cached mode), a passthrough open fails, and while it has a
// backing file, every open must be a passthrough open of that file, or a
// FOPEN_DIRECT_IO one (whose reads and writes come to ferry, and whose
// mmap goes to the backing file). So each node keeps its backing file and
// its cached opens (node.bk, node.cached), and an open is:
//
//   - passthrough: a clean file opened for reading, wholly cached, on a
//     node without cached opens whose backing (if any) holds the same
//     bytes;
//   - direct (FOPEN_DIRECT_IO with the node's backing id): any other
//     read-only open while the node has a backing file (a newer version,
//     a file with local changes);
//   - cached: everything else, as without passthrough.
//
// Cold passthrough: a read-only open may also get a cache file that is
// not whole yet (the block cache fills each range the kernel asks for
// before it reads it). The kernel asks before reads, splice and the like,
// not before the page faults of a mapping made through FUSE passthrough
// (mmap goes straight to the backing file's page cache, where a hole
// reads as zeros). So a cold backing file is handed only to processes
// whose mmap calls ferry intercepts first (Options.Guarded: the task's,
// under a seccomp filter that asks ferry before each file mapping, and
// ferry makes the file whole), never to an exec (the kernel maps the
// binary itself), and any other open of a node with a cold backing file
// waits until that file is whole (completeCold).
//
// Writers pass through too, to a new file's staging file (the whole
// content of a file created or truncated here, see writeback's
// external.go): the kernel writes it at local-disk speed, and reads of
// the file by other opens meanwhile share it. Such a backing's key
// starts with stagingKey.
//
// An open for writing never shares a cache file: the kernel would map
// its writable shared mappings onto the (read-only) cache file, where
// the task's writes would corrupt the cache and never be uploaded. So a
// writer opening a node whose backing is a cache file gets ESTALE, after ferry gave the
// name a new node; the kernel retries the open once with a fresh lookup,
// which finds the new node (no backing file: a cached open). The old node
// lives on for its passthrough opens, as a file replaced by a rename
// does: they keep reading the bytes they opened.
//
// go-fuse's own FilePassthroughFder support registers a backing file per
// node too, but attaches it to every later open of the node, writers
// included, and drops it only after the file handle's Release has run;
// ferry registers backing files itself (under the node's lock, with its
// own counts) and tells go-fuse's raw layer the id through rawFS.

// Passthrough modes (Options.Passthrough).
const (
	PassthroughAuto = "auto" // use it when the kernel and the cache dir allow, else fall back (the default)
	PassthroughOn   = "on"   // fail the mount when it cannot be used
	PassthroughOff  = "off"  // never use it
)

// openMode is how the kernel serves one open (a handle's mode).
type openMode int

const (
	modeCached openMode = iota
	modePassthrough
	modeDirect
)

var modeNames = [...]string{modeCached: "cached", modePassthrough: "passthrough", modeDirect: "direct"}

// backing is the backing file a node's passthrough and direct opens share.
type backing struct {
	id   int32  // the kernel's backing id
	key  string // the identity of its bytes (vfs.Handle.Backing)
	refs int    // opens using it
	// partial: handed out cold, maybe not whole yet (cleared by
	// completeCold once it is).
	partial bool
}

// passthrough is a mount's passthrough state.
type passthrough struct {
	srv *fuse.Server // set once mounted, before any request is served
	on  atomic.Bool  // the kernel takes our backing files
	why string       // why it is off (set before the mount serves requests)
	m   *metrics.FUSE

	mu      sync.Mutex                // guards pending
	pending map[<-chan struct{}]int32 // backing id of an Open being answered, by its request's cancel channel

	guarded      func(pid uint32) bool // Options.Guarded
	writeThrough func(pid uint32) bool // Options.WriteThrough
	mapw         mapWait               // releases of writers held while mappings live (mapwait.go)
}

// execFlag is __FMODE_EXEC, set in the flags of the open the kernel makes
// to execute a file (it then maps the binary itself, unasked).
const execFlag = 0x20

// mayOpenCold reports whether the open of request ctx with flags may get
// a cache file that is not whole yet.
func (p *passthrough) mayOpenCold(ctx context.Context, flags uint32) bool {
	if p == nil || p.guarded == nil || flags&execFlag != 0 {
		return false
	}
	c, ok := fuse.FromContext(ctx)
	return ok && c.Pid != 0 && p.guarded(c.Pid)
}

// mayWriteThrough reports whether the caller of request ctx may write a
// staging file itself.
func (p *passthrough) mayWriteThrough(ctx context.Context) bool {
	if p == nil || p.writeThrough == nil {
		return false
	}
	c, ok := fuse.FromContext(ctx)
	return ok && c.Pid != 0 && p.writeThrough(c.Pid)
}

// requestKey returns what identifies the FUSE request ctx belongs to: its
// cancel channel, one per request in flight.
func requestKey(ctx context.Context) <-chan struct{} {
	if fc, ok := ctx.(*fuse.Context); ok {
		return fc.Cancel
	}
	return nil
}

// note records the backing id the Open of request ctx answers with.
func (p *passthrough) note(ctx context.Context, id int32) {
	k := requestKey(ctx)
	if k == nil {
		return
	}
	p.mu.Lock()
	p.pending[k] = id
	p.mu.Unlock()
}

// take returns (and forgets) the backing id noted for the request.
func (p *passthrough) take(k <-chan struct{}) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := p.pending[k]
	delete(p.pending, k)
	return id
}

// register hands the kernel f as a backing file.
func (p *passthrough) register(f *os.File) (int32, error) {
	id, errno := p.srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(f.Fd())})
	if errno != 0 {
		return 0, errno
	}
	return id, nil
}

func (p *passthrough) unregister(id int32) { p.srv.UnregisterBackingFd(id) }

// probe checks that the kernel takes a backing file from dir (the cache
// directory): it fails without passthrough in the kernel (EPERM, ENOTTY),
// without CAP_SYS_ADMIN in the initial user namespace (EPERM), or on a
// file system stacked too deep (ELOOP: overlayfs over overlayfs).
func (p *passthrough) probe(dir string) error {
	f, err := os.CreateTemp(dir, ".passthrough-probe-*")
	if err != nil {
		return fmt.Errorf("a test file in %s: %w", dir, err)
	}
	os.Remove(f.Name())
	defer f.Close()
	id, err := p.register(f)
	if err != nil {
		why := ""
		switch {
		case errors.Is(err, syscall.EPERM):
			why = " (no FUSE passthrough in this kernel, or no CAP_SYS_ADMIN)"
		case errors.Is(err, syscall.ELOOP):
			why = " (the cache dir's file system is stacked too deep, e.g. overlayfs on overlayfs)"
		case errors.Is(err, syscall.ENOTTY), errors.Is(err, syscall.EINVAL):
			why = " (a kernel older than 6.9)"
		}
		return fmt.Errorf("the kernel refused a backing file in %s: %w%s", dir, err, why)
	}
	p.unregister(id)
	return nil
}

// rawFS is go-fuse's node file system with the backing id of passthrough
// opens filled in (the fs package gives a node's Open no way to set it).
type rawFS struct {
	fuse.RawFileSystem
	pt *passthrough
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := r.RawFileSystem.Open(cancel, in, out)
	if id := r.pt.take(cancel); id != 0 && st == fuse.OK {
		out.BackingID = id
	}
	return st
}

// Create is Open's counterpart for files created by the open (writers
// pass through to the new file's staging file).
func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := r.RawFileSystem.Create(cancel, in, name, out)
	if id := r.pt.take(cancel); id != 0 && st == fuse.OK {
		out.BackingID = id
	}
	return st
}

// attach decides how the kernel serves the new handle fh of n (see the
// package comment above), registers n's backing file when it is the first
// passthrough open, and returns the open flags. The caller passes the
// open's context (for the backing id), the open(2) flags and the flags it
// would use without passthrough. An open that may not see a partial
// cache file waits until n's is whole; EIO when it cannot be made whole.
func (n *node) attach(ctx context.Context, fh *handle, openFlags, flags uint32) (uint32, syscall.Errno) {
	pt := n.pt
	cold := pt.mayOpenCold(ctx, openFlags)
	for attempt := 0; ; attempt++ {
		if pt != nil && pt.on.Load() && !cold {
			if err := n.completeCold(ctx); err != nil {
				return 0, syscall.EIO
			}
		}
		out, ok := n.attachOnce(ctx, fh, flags, cold)
		if ok && fh.stale {
			n.split(ctx) // a writer that cannot pass through: see attachOnce
			return 0, syscall.ESTALE
		}
		if ok || attempt >= 3 {
			return out, 0
		}
	}
}

// attachOnce is attach's one try; ok is false (and nothing done) when an
// open that may not see a partial file found n's backing file partial
// (handed out meanwhile): the caller completes it and tries again.
func (n *node) attachOnce(ctx context.Context, fh *handle, flags uint32, cold bool) (uint32, bool) {
	pt := n.pt
	var bf *os.File
	var key string
	var partial bool
	if pt != nil && pt.on.Load() && n.mayPassthrough() && (!fh.write || pt.mayWriteThrough(ctx)) {
		var ok bool
		if bf, key, partial, ok = fh.h.Backing(cold); !ok {
			bf = nil
		} else {
			defer bf.Close() // the kernel keeps its own reference
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !cold && n.bk != nil && n.bk.partial {
		return 0, false
	}
	if bf != nil {
		n.awaitReleasesLocked()
	}
	if fh.write && n.bk != nil && (bf == nil || n.bk.key != key) {
		// A writer that does not pass through to n's backing file (a
		// staging file its writer no longer may write: reopened) would
		// be a direct open, whose shared mappings write that file
		// unseen: it gets a node of its own, as beside a cache file.
		fh.stale = true
		return 0, true
	}
	if n.open == nil {
		n.open = map[*handle]struct{}{}
	}
	n.open[fh] = struct{}{}
	n.s.add(fh)
	if bf != nil && n.cached == 0 && n.bk == nil {
		if id, err := pt.register(bf); err == nil {
			n.bk = &backing{id: id, key: key, partial: partial}
		}
	}
	switch {
	case n.bk != nil && bf != nil && n.bk.key == key:
		fh.mode = modePassthrough
		flags = flags&^fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_PASSTHROUGH
		if !fh.write {
			// Nothing to flush, and no cached open waits on its close
			// (closingLocked): the kernel sends no FLUSH at each close.
			flags |= fuse.FOPEN_NOFLUSH
		}
	case n.bk != nil:
		fh.mode = modeDirect
		flags = flags&^fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_PASSTHROUGH | fuse.FOPEN_DIRECT_IO
	default:
		fh.mode = modeCached
		n.cached++
		n.m.Opened(modeNames[fh.mode])
		return flags, true
	}
	n.bk.refs++
	pt.note(ctx, n.bk.id)
	n.m.Opened(modeNames[fh.mode])
	if fh.mode == modePassthrough {
		fh.h.NotePassthrough()
	}
	return flags, true
}

// completeCold makes n's backing file whole when it was handed out cold
// and may not be yet (through one of the passthrough handles that hold
// it), so that an open that may map it without ferry seeing (an exec, a
// process whose mappings ferry does not guard) never reads a hole.
func (n *node) completeCold(ctx context.Context) error {
	for {
		n.mu.Lock()
		bk := n.bk
		var h *handle
		if bk != nil && bk.partial {
			for o := range n.open {
				if o.mode == modePassthrough {
					h = o
					break
				}
			}
		}
		n.mu.Unlock()
		if h == nil {
			return nil // none, or whole
		}
		if err := h.h.CompleteBacking(ctx); err != nil {
			n.mu.Lock()
			same := n.bk == bk && n.open != nil
			_, still := n.open[h]
			n.mu.Unlock()
			if same && still {
				return err
			}
			continue // that handle went meanwhile: try another
		}
		n.mu.Lock()
		if n.bk == bk {
			bk.partial = false
		}
		n.mu.Unlock()
	}
}

// hasCacheBacking reports whether n has a backing file now that is a
// cache file (read-only bytes; not a staging file, see stagingKey).
func (n *node) hasCacheBacking() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bk != nil && !strings.HasPrefix(n.bk.key, stagingKey)
}

// stagingKey starts the key of a backing file that is a dirty file's
// staging file (vfs.Handle.Backing): its writers share it.
const stagingKey = "wb:"

// split gives n's name a new node, for a writer that must not open n
// (see above); the kernel's retry of the open looks the name up again and
// finds it. A node split before (no longer named) is left as it is.
func (n *node) split(ctx context.Context) {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	ch := &node{v: n.v, m: n.m, pt: n.pt, s: n.s}
	if p, ok := n.path(); ok {
		n.s.kins.join(p, n, ch) // see kin.go
	}
	parent.AddChild(name, parent.NewInode(ctx, ch, fs.StableAttr{Mode: syscall.S_IFREG}), true)
	n.NotifyContent(-1, 0) // the attributes the kernel cached (offset -1: not its pages)
}

// mayPassthrough reports whether a passthrough open of n could be taken
// now or in a moment (no cached opens but closed ones whose release has
// not come yet), so that attach looks for a backing file.
func (n *node) mayPassthrough() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cached == 0 || n.closingLocked()
}

// closingLocked reports whether every cached open of n has been closed
// (flushed, not used since): the kernel sends their release after close
// returns, so an open that follows a close at once (a file read twice)
// can find them still counted. n.mu must be held.
func (n *node) closingLocked() bool {
	for h := range n.open {
		if h.mode == modeCached && !h.flushed.Load() {
			return false
		}
	}
	return true
}

// releaseWait bounds how long an open that could pass through waits for
// the release of n's closed cached opens (usually there within a
// millisecond; later on a loaded machine).
const releaseWait = 100 * time.Millisecond

// awaitReleasesLocked waits (polling, n.mu released meanwhile) up to
// releaseWait for the releases of n's closed cached opens. n.mu must be
// held.
func (n *node) awaitReleasesLocked() {
	deadline := time.Now().Add(releaseWait)
	for n.cached > 0 && n.closingLocked() && time.Now().Before(deadline) {
		n.mu.Unlock()
		time.Sleep(500 * time.Microsecond)
		n.mu.Lock()
	}
}

// detach forgets the released handle fh of n; the last open using n's
// backing file unregisters it (the kernel has let go of it by then: it
// ends an open's passthrough before it sends the release).
func (n *node) detach(fh *handle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.open, fh)
	n.s.drop(fh)
	switch fh.mode {
	case modeCached:
		n.cached--
	default:
		if n.bk == nil {
			return
		}
		if n.bk.refs--; n.bk.refs == 0 {
			n.pt.unregister(n.bk.id)
			n.bk = nil
		}
	}
}

// newRawFS builds the raw file system for root with passthrough state pt.
func newRawFS(root fs.InodeEmbedder, opts *fs.Options, pt *passthrough) fuse.RawFileSystem {
	return &rawFS{RawFileSystem: fs.NewNodeFS(root, opts), pt: pt}
}
