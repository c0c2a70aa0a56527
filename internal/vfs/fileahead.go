package vfs

import (
	"context"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/cache/meta"
)

// Directory readahead of files: a process that reads small files one
// after the other (cat of a directory, find -exec cat, a Zarr reader
// opening chunk files in key order, MultiQC walking logs) pays a round
// trip per file. Each process's opens are followed as streams through
// the walk order of walk.go (names sorted, or in natural order: a stream
// follows the order its opens take); once a process opens the file that
// follows the one it opened before, ferry fetches the next files of the walk
// into the block cache (Cache.Predict) before they are opened. The
// window (files predicted ahead) starts at faFirstWindow and doubles
// with each open the prediction foresaw, up to faMaxWindow, as
// sequential readahead does inside a file; an open it did not foresee in
// a stream's directory collapses the stream: its predictions not opened
// yet are dropped and the window starts again from zero. A process that
// opens the next file another process's stream expects (the next batch
// of xargs, a reader restarted) takes that stream over, window and all;
// one that opens a file another stream predicted further ahead starts a
// stream of its own, confirmed at once.
//
// Bounds: a predicted file up to faFileMax is fetched whole, a larger
// one its first block only; the bytes predicted and not opened yet stay
// within faDirBudget per directory and faBudget (at most an eighth of
// the cache) for the mount; the block cache runs predictions below
// demand reads and readahead, and none while its disk is under the
// free-space floor. Only cached listings are walked (a subdirectory the
// walk enters is listed in the background, capped as a lookup's
// listing); a listing of more than faMaxEntries names is not predicted
// in. Files with local changes, created here and not listed since, and
// empty ones are skipped. A predicted object deleted or changed before
// its GET is skipped quietly (the task's own open sees the store).
const (
	faFirstWindow   = 4
	faMaxWindow     = 128
	faFileMax       = 8 << 20
	faDirBudget     = 64 << 20
	faBudget        = 256 << 20
	faStreamsPerPid = 4
	faMaxPids       = 1024
	faIdle          = 10 * time.Second
	// faSteps bounds the names one open looks at to match and to
	// predict (directories full of subdirectories, hidden names).
	faSteps = 4 * faMaxWindow
)

// faMaxEntries: a listing of more names is not predicted in (a variable
// for tests).
var faMaxEntries = 100000

// fileAhead is the directory readahead of one FS. mu is taken before the
// listing, write-back, block-cache and dirAhead locks and is never held
// across a backend call.
type fileAhead struct {
	budget int64 // faBudget capped by the cache's size; 0: off

	mu      sync.Mutex
	pids    map[uint32][]*faStream // streams by process; guarded by mu
	byPos   map[walkPos]*faStream  // the stream each pending prediction is of; guarded by mu
	dirs    map[string]int64       // predicted bytes not opened yet, by directory; guarded by mu
	bytes   int64                  // their sum; guarded by mu
	swept   time.Time              // last sweep of idle streams; guarded by mu
	stopped bool                   // guarded by mu
}

// faStream is one run of opens of one process.
type faStream struct {
	pid     uint32       // the process it follows
	nat     bool         // it walks names in natural order (walk.go)
	at      walkPos      // the file it opened last
	window  int          // files to keep predicted ahead; 0 until confirmed
	pending []*faPredict // predicted, not opened yet, in walk order
	used    time.Time
}

// faPredict is one predicted file.
type faPredict struct {
	pos   walkPos
	bytes int64
	p     *block.Prediction
}

func newFileAhead(on bool, blocks *block.Cache) *fileAhead {
	fa := &fileAhead{pids: map[uint32][]*faStream{}, byPos: map[walkPos]*faStream{}, dirs: map[string]int64{}}
	if on && blocks != nil {
		fa.budget = min(faBudget, blocks.Config().MaxBytes/8)
	}
	return fa
}

// stop drops every stream and its predictions; later opens predict
// nothing.
func (fa *fileAhead) stop() {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	fa.stopped = true
	for pid, ss := range fa.pids {
		for _, s := range ss {
			fa.dropLocked(s, s.pending)
		}
		delete(fa.pids, pid)
	}
}

// noteOpen feeds a read-only open of the clean file l to the caller's
// streams and predicts what they foresee.
func (fs *FS) noteOpen(ctx context.Context, l Loc) {
	fa := fs.fahead
	if fa.budget <= 0 || l.Key == "" {
		return
	}
	pid := fs.caller(ctx).Pid
	pos := posOf(l)
	now := time.Now()
	fa.mu.Lock()
	defer fa.mu.Unlock()
	if fa.stopped {
		return
	}
	fa.sweepLocked(now)
	ss := fa.pids[pid]
	var s *faStream
	for _, c := range ss {
		if c.at == pos {
			c.used = now // the same file again
			return
		}
		if fs.foresaw(c, pos) {
			s = c
			break
		}
	}
	if s == nil {
		s = fa.adopt(pid, pos)
	}
	switch {
	case s != nil:
		s.window = min(faMaxWindow, max(faFirstWindow, 2*s.window))
	case fa.byPos[pos] != nil:
		// Another process's stream foresaw this open (the next batch of
		// xargs while the one before still runs): a stream of its own,
		// confirmed at once.
		fa.takeLocked(fa.byPos[pos], pos)
		s = fa.streamFor(pid, pos)
		s.window = faFirstWindow
	default:
		s = fa.streamFor(pid, pos)
	}
	s.at, s.used = pos, now
	fs.predictLocked(s)
}

// foresaw reports whether pos is where s was going: one of its pending
// predictions (those before it, skipped, are dropped; pos's own leaves
// the budget), or the file after the one it opened last.
func (fs *FS) foresaw(s *faStream, pos walkPos) bool {
	fa := fs.fahead
	if fa.byPos[pos] == s {
		fa.openedLocked(s, pos)
		return true
	}
	steps := faSteps
	if next, _, st, _ := fs.nextFile(s.at, &steps, s.nat); st == walkFile && next == pos {
		return true
	}
	// The other order: the stream follows it from now on, and its
	// predictions in the order it left are dropped.
	steps = faSteps
	if next, _, st, _ := fs.nextFile(s.at, &steps, !s.nat); st == walkFile && next == pos {
		fa.dropLocked(s, s.pending)
		s.pending, s.nat = nil, !s.nat
		return true
	}
	return false
}

// openedLocked takes the pending prediction of pos (which s has) out of
// s: those before it were skipped and are dropped; its own bytes leave
// the budget.
func (fa *fileAhead) openedLocked(s *faStream, pos walkPos) {
	for i, p := range s.pending {
		if p.pos == pos {
			fa.dropLocked(s, s.pending[:i])
			fa.releaseLocked(s, p)
			s.pending = s.pending[i+1:]
			return
		}
	}
}

// takeLocked takes the pending prediction of pos out of s (another
// process opened it), leaving s's others.
func (fa *fileAhead) takeLocked(s *faStream, pos walkPos) {
	for i, p := range s.pending {
		if p.pos == pos {
			fa.releaseLocked(s, p)
			s.pending = append(s.pending[:i:i], s.pending[i+1:]...)
			return
		}
	}
}

// adopt hands pid the stream of another process whose next expected
// file is pos (its first pending prediction): the process that read the
// files before pos has moved on or ended. nil when there is none.
func (fa *fileAhead) adopt(pid uint32, pos walkPos) *faStream {
	o := fa.byPos[pos]
	if o == nil || o.pid == pid || len(o.pending) == 0 || o.pending[0].pos != pos {
		return nil
	}
	old := fa.pids[o.pid]
	for i, c := range old {
		if c == o {
			old = append(old[:i:i], old[i+1:]...)
			break
		}
	}
	if len(old) == 0 {
		delete(fa.pids, o.pid)
	} else {
		fa.pids[o.pid] = old
	}
	fa.makeRoomLocked(pid)
	o.pid = pid
	fa.pids[pid] = append(fa.pids[pid], o)
	fa.openedLocked(o, pos)
	return o
}

// streamFor returns the stream an unforeseen open of pos by pid
// restarts: the process's stream in pos's directory (collapsed), else a
// new one (the process's least recently used stream makes room).
func (fa *fileAhead) streamFor(pid uint32, pos walkPos) *faStream {
	for _, c := range fa.pids[pid] {
		if c.at.dir == pos.dir {
			fa.dropLocked(c, c.pending)
			c.pending, c.window = nil, 0
			return c
		}
	}
	fa.makeRoomLocked(pid)
	s := &faStream{pid: pid}
	fa.pids[pid] = append(fa.pids[pid], s)
	return s
}

// makeRoomLocked makes room for one more stream of pid: its least
// recently used one goes when it has faStreamsPerPid, every stream when
// faMaxPids processes have some.
func (fa *fileAhead) makeRoomLocked(pid uint32) {
	ss := fa.pids[pid]
	if len(ss) >= faStreamsPerPid {
		lru := 0
		for i, c := range ss {
			if c.used.Before(ss[lru].used) {
				lru = i
			}
		}
		fa.dropLocked(ss[lru], ss[lru].pending)
		fa.pids[pid] = append(ss[:lru:lru], ss[lru+1:]...)
	}
	if len(fa.pids) >= faMaxPids && fa.pids[pid] == nil {
		fa.sweepLocked(time.Time{}) // drop every stream
	}
}

// predictLocked tops s up to its window: the next files of the walk
// after its last prediction (or the file it opened), within the budgets.
func (fs *FS) predictLocked(s *faStream) {
	fa := fs.fahead
	if s.window == 0 {
		return
	}
	from := s.at
	if n := len(s.pending); n > 0 {
		from = s.pending[n-1].pos
	}
	bs := fs.deps.Blocks.Config().BlockSize
	steps := faSteps
	for len(s.pending) < s.window {
		pos, e, st, need := fs.nextFile(from, &steps, s.nat)
		if st == walkUnlist {
			fs.ahead.start(need, fs.listForWalk)
		}
		if st != walkFile {
			return
		}
		from = pos
		if maybeNode(e.Info) {
			continue // empty, or maybe a symlink: nothing worth fetching
		}
		n := e.Info.Size
		if n > faFileMax {
			n = bs
		}
		dk := pos.dir.cacheKey()
		if fa.bytes+n > fa.budget || fa.dirs[dk]+n > faDirBudget {
			return
		}
		l := pos.loc()
		st2, err := fs.deps.Resolve(context.Background(), l.Scheme, l.Bucket) // cached: no I/O
		if err != nil {
			return
		}
		ref := block.Ref{Store: st2, StoreID: l.Scheme + "/" + l.Bucket, Key: l.Key, Version: e.Info.Version, Size: e.Info.Size}
		p := fs.deps.Blocks.Predict(ref, n, len(s.pending)) // the nearest first
		if p == nil {
			return // no room in the cache
		}
		fa.bytes += n
		fa.dirs[dk] += n
		s.pending = append(s.pending, &faPredict{pos: pos, bytes: n, p: p})
		fa.byPos[pos] = s
	}
}

// listedClean reports whether the file at pos is as listed: with a
// version (not patched in by a create here), without local changes, not
// renamed away.
func (fs *FS) listedClean(pos walkPos, e meta.DirEntry) bool {
	if e.Info.Version == "" {
		return false
	}
	t := pos.loc().target()
	return fs.deps.Writeback.Get(t) == nil && !fs.deps.Writeback.PendingDelete(t)
}

// listForWalk lists l (capped as a lookup's listing) for the walk.
func (fs *FS) listForWalk(ctx context.Context, l Loc) {
	_, _ = fs.tryListing(ctx, l) // a failure only ends the walk there
}

// dropLocked cancels predictions of s and returns their bytes to the
// budgets.
func (fa *fileAhead) dropLocked(s *faStream, ps []*faPredict) {
	for _, p := range ps {
		p.p.Cancel()
		fa.releaseLocked(s, p)
	}
}

// releaseLocked returns the bytes of p, a prediction of s, to the
// budgets.
func (fa *fileAhead) releaseLocked(s *faStream, p *faPredict) {
	if fa.byPos[p.pos] == s {
		delete(fa.byPos, p.pos)
	}
	fa.bytes -= p.bytes
	dk := p.pos.dir.cacheKey()
	if fa.dirs[dk] -= p.bytes; fa.dirs[dk] <= 0 {
		delete(fa.dirs, dk)
	}
}

// sweepLocked drops the streams idle since before now-faIdle (every
// stream when now is zero), at most once per faIdle/4 otherwise.
func (fa *fileAhead) sweepLocked(now time.Time) {
	if !now.IsZero() && now.Sub(fa.swept) < faIdle/4 {
		return
	}
	fa.swept = now
	for pid, ss := range fa.pids {
		kept := ss[:0]
		for _, s := range ss {
			if now.IsZero() || now.Sub(s.used) > faIdle {
				fa.dropLocked(s, s.pending)
				continue
			}
			kept = append(kept, s)
		}
		if len(kept) == 0 {
			delete(fa.pids, pid)
		} else {
			fa.pids[pid] = kept
		}
	}
}
