package block

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Input staging: a task's inputs, named before it starts, fetched into the
// cache in the background so that its reads find them there.
//
//   - Order: the Early inputs (small files, indexes, the objects of a
//     directory input) first, whole, up to StageOptions.Parallel at a
//     time (the fetch workers: the download budget); then the others one
//     at a time, in
//     order, each from its start.
//   - Rate: staging fetches are queued at prioStage, below reads and
//     readahead, and each input keeps at most stageParts GETs of PartSize
//     queued ahead, so staging takes the workers that no read waits for.
//   - Bounds: the bytes staged and not yet read stay within the budget
//     (half the cache by default; staging pauses until the task reads);
//     an input that is cached whole costs one look at the disk; staging of
//     an input stops once the task reads it sequentially past the staged
//     point (its own readahead carries on from there).
//   - Accounting, per cache block: staged = blocks staging made present
//     before the task read them; hits = those the task read without
//     waiting; wasted = those the task never read when the Stager stops.
//     A staged block the task read while waiting for the fetch staging had
//     running is read (not a hit, not wasted); one the task had to fetch
//     again (evicted, damaged) is wasted.
//
// Reads reach a Stager through Cache.stageRead, which the Reader calls
// (see its doc comment).

const (
	// stageParts bounds the GETs of PartSize one input keeps queued ahead
	// (at least; MaxConcurrency/4 with the default 32 workers: 8).
	stageParts = 2
	// stageSlack is how far from the staged point a sequential read still
	// counts as reading at it.
	stageSlack = 2 << 20
	// stageMinRun is how long a sequential run of the task's reads must be
	// before it stops the staging it passed: a header read is not a stream.
	stageMinRun = 8 << 20
	// stageEarlyQueue: the Early inputs staged at once keep as many
	// blocks queued together as this many inputs of the others would.
	stageEarlyQueue = 4
)

// StageInput is one object to stage.
type StageInput struct {
	Ref Ref
	// Early inputs (small files, indexes, a directory's objects) are
	// staged first, whole, several	// at a time.
	Early bool
}

// StageOptions tune Cache.Stage; zero fields select defaults.
type StageOptions struct {
	// Budget bounds the staged bytes the task has not read yet; default
	// half of MaxBytes (readahead windows take at most a quarter).
	Budget int64
	// Parallel is how many Early inputs are staged at once; default the
	// number of fetch workers (Config.MaxConcurrency, within the memory
	// budget).
	Parallel int
	// Logger receives a line per input that could not be staged (info)
	// and per input whose staging stopped (debug); nil discards them.
	Logger *slog.Logger
}

// StageStats counts what a Stager did. The byte counts are whole cache
// blocks.
type StageStats struct {
	Inputs  int // distinct objects given
	Staged  int // inputs staged whole
	Cached  int // inputs already cached whole (nothing fetched)
	Stopped int // inputs whose staging stopped: the task read past it
	Failed  int // inputs that could not be staged (missing, denied, changed)
	// StagedBytes are bytes staging made present before the task read
	// them; HitBytes are those the task then read without waiting;
	// WastedBytes (set by Stop) are those the task never read, or read
	// only after fetching them again (evicted or damaged meanwhile).
	StagedBytes int64
	HitBytes    int64
	WastedBytes int64
	// CachedBytes are the bytes of the inputs found cached whole.
	CachedBytes int64
	// Done is true once every input was handled (or Stop was called).
	Done bool
	// Finished is when every input had been handled; zero when Stop came
	// first.
	Finished time.Time
}

// stageKey names an object version in a Stager.
type stageKey struct {
	storeID, key, version string
	size                  int64
}

func keyOf(r Ref) stageKey { return stageKey{r.StoreID, r.Key, r.Version, r.Size} }

// Stager stages one task's inputs in the background (Cache.Stage). Its
// methods are safe for concurrent use.
type Stager struct {
	c      *Cache
	opts   StageOptions
	bs     int64 // accounting unit: the cache block
	ahead  int64 // blocks an input that is not Early keeps queued ahead
	log    *slog.Logger
	ctx    context.Context // canceled by Stop
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	// mu guards every field below and the mutable fields of every
	// stageFile; never held during I/O. cond (on mu) wakes inputs waiting
	// for budget.
	mu      sync.Mutex
	cond    sync.Cond
	files   map[stageKey]*stageFile
	order   []*stageFile
	st      StageStats
	used    int64 // staged bytes the task read (now or after the fetch staging ran)
	lost    int64 // staged bytes the task read after fetching them again
	stopped bool
	waiting int // inputs waiting for budget (tests look at it)
}

// File states.
const (
	stQueued = iota
	stActive
	stStaged
	stCached
	stStopped
	stFailed
	stCanceled
)

// stageFile is one input of a Stager.
type stageFile struct {
	in     StageInput
	blocks int64
	ahead  int64    // blocks it keeps queued ahead
	staged []uint64 // bitset: blocks staging made present before any read
	read   []uint64 // bitset: blocks the task read
	lost   []uint64 // bitset: staged blocks the task read after fetching them again
	cursor int64    // bytes staged from the start (warm's progress)
	// The task's current sequential run of reads.
	runStart, runEnd int64
	state            int
	stop             bool               // the task read past the staged point
	cancel           context.CancelFunc // while active
}

func bit(b []uint64, i int64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func setBit(b []uint64, i int64)   { b[i/64] |= 1 << (i % 64) }

func (f *stageFile) blockLen(i int64, bs int64) int64 {
	return min(bs, f.in.Ref.Size-i*bs)
}

// Stage starts staging inputs in the background and returns at once.
// Inputs of size 0 and repeats are left out. Call Stop when the task ends:
// it ends the staging and settles the accounting.
func (c *Cache) Stage(inputs []StageInput, opts StageOptions) *Stager {
	if opts.Budget <= 0 {
		opts.Budget = c.cfg.MaxBytes / 2
	}
	if opts.Parallel <= 0 {
		opts.Parallel = c.nworkers
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bs := c.cfg.BlockSize
	partBlocks := max(1, c.cfg.PartSize/bs)
	ahead := max(stageParts, int64(c.cfg.MaxConcurrency)/4) * partBlocks
	ahead = max(1, min(ahead, opts.Budget/2/bs))
	// Early inputs staged side by side share what stageEarlyQueue inputs
	// would keep queued, at least a part each.
	early := min(ahead, max(partBlocks, stageEarlyQueue*ahead/int64(opts.Parallel)))
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stager{c: c, opts: opts, bs: bs, ahead: ahead, log: log, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), files: map[stageKey]*stageFile{}}
	s.cond.L = &s.mu
	for _, in := range inputs {
		k := keyOf(in.Ref)
		if in.Ref.Size <= 0 || s.files[k] != nil {
			continue
		}
		n := (in.Ref.Size + bs - 1) / bs
		f := &stageFile{in: in, blocks: n, ahead: ahead, staged: make([]uint64, (n+63)/64), read: make([]uint64, (n+63)/64), lost: make([]uint64, (n+63)/64)}
		if in.Early {
			f.ahead = early
		}
		s.files[k] = f
		s.order = append(s.order, f)
	}
	s.st.Inputs = len(s.order)
	c.register(s)
	go s.run() // owner: s; Stop waits for it
	return s
}

// run stages the Early inputs, Parallel at a time, then the others in
// order.
func (s *Stager) run() {
	defer close(s.done)
	sem := make(chan struct{}, s.opts.Parallel)
	var wg sync.WaitGroup
	for _, f := range s.order {
		if !f.in.Early {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
		}
		if s.ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() { // owner: run, which waits on wg
			defer wg.Done()
			defer func() { <-sem }()
			s.one(f)
		}()
	}
	wg.Wait()
	for _, f := range s.order {
		if s.ctx.Err() != nil {
			break
		}
		if !f.in.Early {
			s.one(f)
		}
	}
	s.mu.Lock()
	s.st.Done = true
	if s.ctx.Err() == nil {
		s.st.Finished = time.Now()
	}
	s.mu.Unlock()
}

// one stages f unless it is cached whole already.
func (s *Stager) one(f *stageFile) {
	ref := f.in.Ref
	if s.c.Cached(ref) >= ref.Size {
		s.mu.Lock()
		f.state = stCached
		f.cursor = ref.Size
		s.st.Cached++
		s.st.CachedBytes += ref.Size
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.mu.Lock()
	if !s.waitBudgetLocked(f) {
		f.state = stCanceled
		s.mu.Unlock()
		return
	}
	f.state, f.cancel = stActive, cancel
	s.mu.Unlock()
	o := s.c.object(ref)
	err := s.c.warm(ctx, o, prioStage, f.ahead, o.nblocks, func(done int64) { s.progress(f, done) })
	s.mu.Lock()
	defer s.mu.Unlock()
	f.cancel = nil
	switch {
	case err == nil:
		f.state = stStaged
		s.st.Staged++
	case f.stop:
		f.state = stStopped
		s.st.Stopped++
		s.log.Debug("staging stopped: the task reads it", "object", ref.StoreID+"/"+ref.Key, "staged", f.cursor)
	case s.stopped || errors.Is(err, ErrClosed) || s.ctx.Err() != nil:
		f.state = stCanceled
	default:
		f.state = stFailed
		s.st.Failed++
		s.log.Info("staging skipped an input", "object", ref.StoreID+"/"+ref.Key, "reason", stageReason(err))
	}
}

// stageReason says briefly why an input could not be staged.
func stageReason(err error) string {
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return "not found: " + err.Error()
	case errors.Is(err, objstore.ErrPermission):
		return "permission denied: " + err.Error()
	case errors.Is(err, objstore.ErrPrecondition):
		return "changed since it was listed: " + err.Error()
	}
	return err.Error()
}

// waitBudgetLocked waits until f's next stretch fits in the budget; false
// when f or the Stager was stopped meanwhile. s.mu must be held.
func (s *Stager) waitBudgetLocked(f *stageFile) bool {
	for {
		if s.stopped || f.stop || s.ctx.Err() != nil {
			return false
		}
		next := min(f.ahead*s.bs, f.in.Ref.Size-f.cursor)
		if s.st.StagedBytes-s.used-s.lost+next <= s.opts.Budget {
			return true
		}
		s.waiting++
		s.cond.Wait()
		s.waiting--
	}
}

// progress records that blocks [0, done) of f are cached (warm's
// progress), then waits for budget for the next stretch.
func (s *Stager) progress(f *stageFile, done int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := f.in.Ref.Size
	for i := f.cursor / s.bs; i < f.blocks && ((i+1)*s.bs <= done || done >= size); i++ {
		if !bit(f.read, i) && !bit(f.staged, i) {
			setBit(f.staged, i)
			s.st.StagedBytes += f.blockLen(i, s.bs)
		}
	}
	f.cursor = max(f.cursor, done)
	if done < size {
		s.waitBudgetLocked(f) // a false return: warm sees its context next
	}
}

// noteRead records a read of [off, off+n) of the object key by the task;
// w says whether and how the read waited for a fetch.
func (s *Stager) noteRead(k stageKey, off, n int64, w waitKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil || off < 0 || off >= f.in.Ref.Size {
		return
	}
	end := min(off+n, f.in.Ref.Size)
	freed := false
	for i := off / s.bs; i*s.bs < end; i++ {
		if bit(f.read, i) {
			continue
		}
		setBit(f.read, i)
		if bit(f.staged, i) {
			freed = true
			switch w {
			case waitNone:
				s.st.HitBytes += f.blockLen(i, s.bs)
				s.used += f.blockLen(i, s.bs)
			case waitJoined:
				s.used += f.blockLen(i, s.bs)
			case waitFetched:
				s.lost += f.blockLen(i, s.bs)
				setBit(f.lost, i)
			}
		}
	}
	if off >= f.runEnd-stageSlack && off <= f.runEnd+stageSlack && f.runEnd > 0 {
		f.runEnd = max(f.runEnd, end)
	} else {
		f.runStart, f.runEnd = off, end
	}
	if f.state == stActive && !f.stop && f.runStart <= f.cursor+stageSlack &&
		f.runEnd > f.cursor && f.runEnd-f.runStart >= stageMinRun {
		f.stop = true
		if f.cancel != nil {
			f.cancel()
		}
		freed = true
	}
	if freed {
		s.cond.Broadcast()
	}
}

// Stats returns what the Stager did so far.
func (s *Stager) Stats() StageStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Wait returns when every input was handled, or ctx's error.
func (s *Stager) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the staging (fetches it queued are dropped or finish as
// ordinary background fetches), waits for its goroutines, stops counting
// reads, and returns the final statistics with WastedBytes set. Safe to
// call more than once.
func (s *Stager) Stop() StageStats {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.c.unregister(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Done = true
	s.st.WastedBytes = s.st.StagedBytes - s.used
	if s.st.WastedBytes > 0 {
		for _, f := range s.order {
			s.logWasteLocked(f)
		}
	}
	return s.st
}

// logWasteLocked logs (debug) the staged blocks of f the task never read
// and those it read only after fetching them again. Caller holds s.mu.
func (s *Stager) logWasteLocked(f *stageFile) {
	var unread, lost []int64
	for i := range f.blocks {
		switch {
		case !bit(f.staged, i):
		case bit(f.lost, i):
			lost = append(lost, i)
		case !bit(f.read, i):
			unread = append(unread, i)
		}
	}
	if len(unread)+len(lost) > 0 {
		s.log.Debug("staging: staged blocks wasted", "object", f.in.Ref.Key, "block_size", s.bs,
			"unread", firstOf(unread, 8), "fetched_again", firstOf(lost, 8), "n_unread", len(unread), "n_fetched_again", len(lost))
	}
}

// firstOf returns the first n elements of v (all of them when fewer).
func firstOf(v []int64, n int) []int64 { return v[:min(n, len(v))] }
