package vfs

import (
	"context"
	"sync"

	"github.com/ferry-fs/ferry/internal/cache/meta"
)

// Directory walk-ahead: a walker (ls -R, find, du, a pipeline staging a
// tree) lists the subdirectories of a directory one after another, each
// a LIST round trip (hundreds of ms for a page of 1,000 keys). Once it
// has listed two sibling directories in a row, ferry lists the next
// dirAheadN siblings in the background, at most dirAheadConc at once, so
// that the walker finds them in the listing cache. A single `ls` of a
// directory, or a lookup, starts nothing.
// A parent of more than dirAheadMaxParent entries is not looked at (its
// names would be sorted at every step).
const (
	dirAheadN         = 8
	dirAheadConc      = 4
	dirAheadMaxParent = 10000
	// markerAheadConc bounds the HEADs of directory markers fetched
	// ahead (dirattr.go).
	markerAheadConc = 8
)

// dirAhead runs the background listings. Its goroutines are owned by the
// FS: Close cancels them and waits.
type dirAhead struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{} // listings in flight
	msem   chan struct{} // marker HEADs in flight

	// mu guards queued and closed; it is a leaf lock.
	mu     sync.Mutex
	queued map[string]bool // cache keys queued or being listed
	closed bool
}

func newDirAhead() *dirAhead {
	ctx, cancel := context.WithCancel(context.Background())
	return &dirAhead{ctx: ctx, cancel: cancel, sem: make(chan struct{}, dirAheadConc), msem: make(chan struct{}, markerAheadConc), queued: map[string]bool{}}
}

// close cancels the listings in progress and waits for them.
func (a *dirAhead) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}

// Close stops the background work of the file system (directory
// walk-ahead, directory readahead of files) and waits for it; call it
// after unmounting.
func (fs *FS) Close() {
	fs.fahead.stop()
	fs.ahead.close()
}

// walkAhead is called after l was listed for a readdir: when the sibling
// directory just before l was listed too (a walker), it lists the next
// dirAheadN sibling directories that are not cached yet.
func (fs *FS) walkAhead(l Loc) {
	if l.Key == "" {
		return
	}
	parent, name := l.parent()
	pls, ok := fs.deps.Meta.List(parent.cacheKey())
	if !ok || pls.Len() > dirAheadMaxParent {
		return
	}
	var dirs []string
	at := -1
	for _, e := range pls.Entries() { // sorted by name, as walkers go
		if e.Kind != meta.KindDir {
			continue
		}
		if e.Name == name {
			at = len(dirs)
		}
		dirs = append(dirs, e.Name)
	}
	if at < 1 {
		return
	}
	if _, ok := fs.deps.Meta.List(parent.child(dirs[at-1]).cacheKey()); !ok {
		return // not a walk: the previous sibling was not listed
	}
	for _, d := range dirs[at+1 : min(len(dirs), at+1+dirAheadN)] {
		c := parent.child(d)
		if _, ok := fs.deps.Meta.List(c.cacheKey()); !ok {
			fs.ahead.start(c, fs.listAhead)
		}
	}
}

// listAhead lists l for the walk-ahead (a readdir's listing, shared with
// a readdir that comes meanwhile).
func (fs *FS) listAhead(ctx context.Context, l Loc) {
	_, _ = fs.listing(ctx, l) // errors are the walker's to see, when it gets there
}

// start lists l with list in a goroutine unless it is queued already.
func (a *dirAhead) start(l Loc, list func(context.Context, Loc)) {
	a.startKey(l.cacheKey(), a.sem, func(ctx context.Context) { list(ctx, l) })
}

// startKey runs fn in a goroutine, at most cap(sem) at once, unless work
// of the same key is queued already.
func (a *dirAhead) startKey(key string, sem chan struct{}, fn func(context.Context)) {
	a.mu.Lock()
	if a.closed || a.queued[key] {
		a.mu.Unlock()
		return
	}
	a.queued[key] = true
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			delete(a.queued, key)
			a.mu.Unlock()
		}()
		select {
		case sem <- struct{}{}:
		case <-a.ctx.Done():
			return
		}
		defer func() { <-sem }()
		fn(a.ctx)
	}()
}
