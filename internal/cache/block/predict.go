package block

import (
	"container/heap"
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Directory readahead: the vfs predicts which files a task will open
// next (the next names of a directory it reads file by file) and asks
// the cache to fetch their first bytes before they are opened
// (Cache.Predict). This file fetches and accounts; the prediction itself
// is the vfs's.
//
//   - Rate: predicted fetches are queued at prioPredict, below the
//     task's reads and their readahead and above input staging; all
//     fetch workers but a sixteenth may run predictions at once, so a
//     demand read finds a worker at once. Waiting predictions run
//     nearest first (the rank the caller gives: how far ahead of the
//     task's reads the object is), then oldest first.
//   - Room: nothing is predicted while the cache's file system is below
//     its free-space floor (Config.MinFreeBytes).
//   - Accounting, per cache block, as for input staging: predicted =
//     blocks a prediction made present before the task read them; hits
//     = those the task read without waiting; wasted = predicted blocks
//     the task never read (or read only after fetching them again),
//     counted when the prediction retires: unread for predictRetire, the
//     ledger full, or SettlePredictions (the task ended).

const (
	// predictRetire is how long a predicted object may stay unread
	// before its unread blocks count as wasted.
	predictRetire = 2 * time.Minute
	// maxPredicted bounds the ledger (objects predicted and not yet read
	// whole); the oldest entry retires when it is full.
	maxPredicted = 1 << 14
)

// PredictStats counts what directory readahead did. Byte counts are
// whole cache blocks.
type PredictStats struct {
	// Files counts predictions that fetched something.
	Files int64
	// PredictedBytes are bytes predictions made present before the task
	// read them; HitBytes those the task then read without waiting;
	// WastedBytes those it never read (or read only after fetching them
	// again), counted once their prediction retired; PendingBytes are
	// predicted bytes not read yet whose prediction has not retired.
	PredictedBytes int64
	HitBytes       int64
	WastedBytes    int64
	PendingBytes   int64
}

// Prediction is one object being fetched ahead (Cache.Predict).
type Prediction struct {
	c      *Cache
	o      *object
	limit  int64 // blocks [0, limit) are fetched
	ctx    context.Context
	cancel context.CancelFunc
	rank   int    // queue order: lower first
	seq    uint64 // queue order among equal ranks: older first
	idx    int    // index in its predictor queue; -1 once started or dropped; guarded by predictor.mu
	small  bool   // of a small object: queued in predictor.small (workers.go)
}

// Cancel drops the prediction: not started, it never runs; running, its
// queued fetches are dropped (a GET in progress completes). What it
// fetched stays in the cache.
func (p *Prediction) Cancel() {
	if p == nil {
		return
	}
	pr := &p.c.pred
	pr.mu.Lock()
	if p.idx >= 0 {
		heap.Remove(pr.queueOf(p.small), p.idx)
	}
	pr.mu.Unlock()
	p.cancel()
}

// predictor runs Predictions and keeps their ledger. Its goroutines
// (predictLoop) are owned by the Cache (its wg).
type predictor struct {
	// live is len(ledger), read without the lock by every cache read;
	// lastPredict is when Predict was last called (unix ns): while either
	// says predictions may run, reads are noted.
	live        atomic.Int64
	lastPredict atomic.Int64

	// mu guards the fields below and the fields of every predFile; never
	// held during I/O. Lock order: mu, then Cache.mu (Predict); Cache.mu
	// is never held while taking mu.
	mu      sync.Mutex
	queue   predQueue // Predictions of objects not small, not started
	seq     uint64    // Predictions made
	running int       // predictLoop goroutines of queue
	// small and runningSmall are queue and running for small objects
	// (workers.go), which run at a parallelism of their own.
	small        predQueue
	runningSmall int
	ledger       map[stageKey]*predFile
	order        list.List // of *predFile, oldest first
	st           PredictStats
	// seen are objects the task read (or began to fetch itself) while no
	// ledger entry named them, and when: a prediction of one of them in
	// the next predictSeen is not made (it would count the task's own
	// fetch as predicted, and as wasted).
	seen map[stageKey]time.Time
}

// predictSeen is how long a read of an object without a ledger entry
// keeps predictions of it from starting.
const predictSeen = time.Minute

// maxSeen bounds predictor.seen.
const maxSeen = 4096

// watching reports whether reads must be noted: a ledger entry exists,
// or a prediction was asked for within predictSeen.
func (pr *predictor) watching() bool {
	return pr.live.Load() > 0 || time.Now().UnixNano()-pr.lastPredict.Load() < int64(predictSeen)
}

// sawLocked records a read of k, which has no ledger entry. pr.mu must
// be held.
func (pr *predictor) sawLocked(k stageKey) {
	now := time.Now()
	if pr.seen == nil {
		pr.seen = map[stageKey]time.Time{}
	}
	if len(pr.seen) >= maxSeen {
		for x, at := range pr.seen {
			if now.Sub(at) > predictSeen || len(pr.seen) >= maxSeen {
				delete(pr.seen, x)
			}
		}
	}
	pr.seen[k] = now
}

// predFile is the ledger entry of one predicted object version.
type predFile struct {
	k      stageKey
	bs     int64
	blocks int64    // blocks predicted: [0, blocks)
	staged []uint64 // bitset: blocks prediction made present before any read
	read   []uint64 // bitset: blocks the task read
	unread int64    // bytes staged and not read
	at     time.Time
	el     *list.Element
}

func (f *predFile) blockLen(i int64) int64 { return min(f.bs, f.k.size-i*f.bs) }

// predictParallel is how many predictions run at once: every fetch
// worker but a sixteenth of them (at least one), which stay free for
// the task's reads (queued first anyway). Small objects are fetched at
// the rate of GETs in flight, not of bandwidth.
func (c *Cache) predictParallel() int { return max(1, c.nworkers-max(1, c.nworkers/16)) }

// Predict starts fetching the first upto bytes of ref (whole blocks) in
// the background at directory-readahead priority and returns the
// Prediction, or nil when nothing is fetched: the Cache is closed, the
// object empty, or its file system below the free-space floor. A
// failure of the fetch (the object deleted or changed since it was
// listed) is not reported: the task's own open sees the store as it is.
func (c *Cache) Predict(ref Ref, upto int64, rank int) *Prediction {
	if ref.Size <= 0 || upto <= 0 || c.ctx.Err() != nil || c.st.free.Load() < c.cfg.MinFreeBytes {
		return nil
	}
	c.pred.lastPredict.Store(time.Now().UnixNano())
	o := c.object(ref)
	ctx, cancel := context.WithCancel(c.ctx)
	small := isSmallObject(ref.Size)
	p := &Prediction{c: c, o: o, limit: min(o.nblocks, (upto+o.bs-1)/o.bs), ctx: ctx, cancel: cancel, rank: rank, idx: -1, small: small}
	pr := &c.pred
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.retireLocked(time.Now(), false)
	running, limit := pr.runningOf(small), c.predictParallel()
	if small {
		limit += c.nworkers
	}
	if *running < limit {
		c.mu.Lock() // Close waits for c.wg once closed is set
		closed := c.closed
		if !closed {
			c.wg.Add(1)
		}
		c.mu.Unlock()
		if closed {
			cancel()
			return nil
		}
		*running++
		go c.predictLoop(small) // owner: c (wg); returns when its queue is empty or c closes
	}
	pr.seq++
	p.seq = pr.seq
	heap.Push(pr.queueOf(small), p)
	return p
}

// predQueue is a heap of the Predictions not started, by rank then age
// (container/heap; predictor.mu guards it).
type predQueue []*Prediction

func (q predQueue) Len() int { return len(q) }
func (q predQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].seq < q[j].seq
}
func (q predQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}
func (q *predQueue) Push(x any) {
	p := x.(*Prediction)
	p.idx = len(*q)
	*q = append(*q, p)
}
func (q *predQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	p.idx = -1
	*q = old[:len(old)-1]
	return p
}

// queueOf returns the queue of Predictions of small objects or of the
// others. pr.mu must be held.
func (pr *predictor) queueOf(small bool) *predQueue {
	if small {
		return &pr.small
	}
	return &pr.queue
}

// runningOf returns the count of predictLoop goroutines of small objects
// or of the others. pr.mu must be held.
func (pr *predictor) runningOf(small bool) *int {
	if small {
		return &pr.runningSmall
	}
	return &pr.running
}

// predictLoop runs queued Predictions of small objects or of the others
// until none is left.
func (c *Cache) predictLoop(small bool) {
	defer c.wg.Done()
	pr := &c.pred
	for {
		pr.mu.Lock()
		q := pr.queueOf(small)
		if q.Len() == 0 || c.ctx.Err() != nil {
			*pr.runningOf(small)--
			pr.mu.Unlock()
			return
		}
		p := heap.Pop(q).(*Prediction)
		pr.mu.Unlock()
		c.runPrediction(p)
	}
}

// runPrediction fetches p's blocks unless they are cached, recording
// them in the ledger as they land.
func (c *Cache) runPrediction(p *Prediction) {
	defer p.cancel()
	if p.ctx.Err() != nil || c.Cached(p.o.ref) >= min(p.o.ref.Size, p.limit*p.o.bs) {
		return
	}
	pr := &c.pred
	f := pr.entry(keyOf(p.o.ref), p.o.bs, p.limit)
	if f == nil {
		return // the task is reading it already
	}
	var cursor int64
	err := c.warm(p.ctx, p.o, prioPredict, p.limit, p.limit, func(done int64) {
		pr.landed(f, cursor, done)
		cursor = done
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
		c.log.Debug("directory readahead: fetch skipped", "key", p.o.ref.Key, "err", err)
	}
}

// entry returns the ledger entry of k, created (or widened to blocks),
// or nil when the task has read k lately without one (see seen).
func (pr *predictor) entry(k stageKey, bs, blocks int64) *predFile {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ledger == nil {
		pr.ledger = map[stageKey]*predFile{}
	}
	f := pr.ledger[k]
	if at, ok := pr.seen[k]; ok && f == nil {
		if time.Since(at) < predictSeen {
			return nil
		}
		delete(pr.seen, k)
	}
	if f == nil {
		if len(pr.ledger) >= maxPredicted {
			pr.retireOneLocked(pr.order.Front().Value.(*predFile))
		}
		n := (k.size + bs - 1) / bs
		words := (n + 63) / 64
		f = &predFile{k: k, bs: bs, staged: make([]uint64, words), read: make([]uint64, words)}
		pr.ledger[k] = f
		pr.live.Store(int64(len(pr.ledger)))
		pr.st.Files++
	} else {
		pr.order.Remove(f.el)
	}
	f.blocks = max(f.blocks, blocks)
	f.at = time.Now()
	f.el = pr.order.PushBack(f)
	return f
}

// landed records that the blocks of f covering bytes [from, done) are
// in the cache.
func (pr *predictor) landed(f *predFile, from, done int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ledger[f.k] != f {
		return // retired meanwhile
	}
	for i := from / f.bs; i < f.blocks && i*f.bs < done; i++ {
		if !bit(f.read, i) && !bit(f.staged, i) {
			setBit(f.staged, i)
			n := f.blockLen(i)
			f.unread += n
			pr.st.PredictedBytes += n
			pr.st.PendingBytes += n
		}
	}
}

// noteRead records a read of [off, off+n) of the object k by the task;
// w says whether and how the read waited for a fetch.
func (pr *predictor) noteRead(k stageKey, off, n int64, w waitKind) {
	if !pr.watching() {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	f := pr.ledger[k]
	if f == nil {
		pr.sawLocked(k)
		return
	}
	if off < 0 || off >= k.size {
		return
	}
	end := min(off+n, k.size)
	for i := off / f.bs; i*f.bs < end; i++ {
		if bit(f.read, i) {
			continue
		}
		setBit(f.read, i)
		if !bit(f.staged, i) {
			continue
		}
		m := f.blockLen(i)
		f.unread -= m
		pr.st.PendingBytes -= m
		switch w {
		case waitNone:
			pr.st.HitBytes += m
		case waitFetched: // evicted or damaged, and fetched again
			pr.st.WastedBytes += m
		}
	}
	if f.unread == 0 && allRead(f) {
		pr.removeLocked(f)
	}
}

// noteDemand records that the task's read of block idx of the object k
// started its fetch itself: a prediction that finds it present later
// did not predict it (it is not counted, neither hit nor wasted). A block
// predicted before and fetched again counts as wasted when the read ends
// (noteRead, waitFetched).
func (pr *predictor) noteDemand(k stageKey, idx int64) {
	if !pr.watching() {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	f := pr.ledger[k]
	if f == nil {
		pr.sawLocked(k)
		return
	}
	if bit(f.read, idx) || bit(f.staged, idx) {
		return
	}
	setBit(f.read, idx)
}

// allRead reports whether the task read every predicted block of f.
func allRead(f *predFile) bool {
	for i := range f.blocks {
		if !bit(f.read, i) {
			return false
		}
	}
	return true
}

// retireLocked retires the entries unread for predictRetire (all of
// them with all). pr.mu must be held.
func (pr *predictor) retireLocked(now time.Time, all bool) {
	for e := pr.order.Front(); e != nil; e = pr.order.Front() {
		f := e.Value.(*predFile)
		if !all && now.Sub(f.at) < predictRetire {
			return
		}
		pr.retireOneLocked(f)
	}
}

// retireOneLocked counts f's unread predicted blocks as wasted and drops
// it. pr.mu must be held.
func (pr *predictor) retireOneLocked(f *predFile) {
	pr.st.WastedBytes += f.unread
	pr.st.PendingBytes -= f.unread
	f.unread = 0
	pr.removeLocked(f)
}

func (pr *predictor) removeLocked(f *predFile) {
	delete(pr.ledger, f.k)
	pr.order.Remove(f.el)
	pr.live.Store(int64(len(pr.ledger)))
}

// PredictStats returns what directory readahead did so far.
func (c *Cache) PredictStats() PredictStats {
	pr := &c.pred
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.retireLocked(time.Now(), false)
	return pr.st
}

// SettlePredictions retires every prediction (the task ended: what it did
// not read is wasted) and returns the final statistics. Predictions made
// afterwards are counted as before.
func (c *Cache) SettlePredictions() PredictStats {
	pr := &c.pred
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.retireLocked(time.Now(), true)
	return pr.st
}
