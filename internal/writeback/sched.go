package writeback

import (
	"container/list"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Request classes of the scheduler: heavy requests carry data (parts and
// objects of at least smallRequest bytes), light ones cost latency only.
const (
	classLight = iota
	classHeavy
	numClasses
)

// sched admits upload requests and upload attempts (see README.md, "the
// task first").
//
// Requests: each class has its limit of requests in flight
// (Config.Concurrency, SmallConcurrency). On top of that, uploads yield to
// the task: while the foreground is active (at least fgBurst calls such
// as Create, WriteAt, Flush, Release within Config.ForegroundQuiet), a
// request starts only while fewer than Config.ForegroundUploads requests
// of any class are in flight, at most a quarter of them heavy (at least
// one), and a heavy one only after it waited heavyBusyWait, because on a small machine the CPU that uploads take (signing, hashing,
// HTTP, maybe a local object server) slows the writer down far more than
// it speeds the uploads up. A Sync or Drain waiting lifts that limit (see
// hurry).
//
// Attempts: an upload attempt prepares its requests (journal records, a
// staging file opened…) before it asks for a slot, so attempts start (see
// start) only while few requests wait for a slot: while the foreground is
// active, fewer than fgLimit; otherwise fewer than there are slots. The
// queue stays short and the preparation is not spent in the task's time,
// nor in a herd of goroutines contending for the manager's locks.
//
// No waiter starves while the foreground stays active: requests and
// attempts are served in arrival order (an attempt's first request takes
// its place in the queue from the attempt's arrival, and an attempt older
// than every waiting request starts), and requests keep starting as others
// end. While the foreground is quiet, each class is served in order up to
// its limit.
type sched struct {
	quiet   time.Duration    // <= 0: the foreground never limits
	fgLimit int              // requests in flight while the foreground is active
	fgHeavy int              // of which heavy: a quarter, at least 1
	limit   [numClasses]int  // requests in flight per class
	clock   func() time.Time // monotonic clock; tests replace it
	epoch   time.Time
	node    *nodeFG // the other Managers on the node (nodefg.go); nil: none. Set before use.
	// ops: the times of the last fgBurst foreground ops (ns from epoch,
	// 0 = none), a ring indexed by opN.
	ops [fgBurst]atomic.Int64
	opN atomic.Uint64

	// mu guards the fields below; it is a leaf lock.
	mu       sync.Mutex
	inflight [numClasses]int
	waiting  [numClasses]list.List // requests (*waiter), by seq
	queued   int                   // requests waiting, all classes
	starters list.List             // attempts (*waiter) waiting to start, by seq
	tickets  int                   // attempts started that have not asked for a slot yet
	seq      uint64                // arrival counter
	hurries  int                   // Sync and Drain calls waiting
	syncs    int                   // of which Sync calls
	timer    *time.Timer           // looks again when the foreground may be quiet
	timerAt  time.Time             // when timer fires (zero: not armed)
	stopped  bool
}

// waiter is a request or an attempt waiting for its turn.
type waiter struct {
	class int // request class; -1 for an attempt
	seq   uint64
	since time.Time     // arrival (of the attempt, for its first request)
	ready chan struct{} // closed when admitted
	elem  *list.Element // nil once admitted
}

// ticket is an attempt started by start. Its first request keeps the
// attempt's place in the queue; done ends it (idempotent).
type ticket struct {
	s     *sched
	seq   uint64
	since time.Time
	used  bool // guarded by s.mu: its first request asked for a slot, or done
}

type ticketKey struct{}

func newSched(quiet time.Duration, fgLimit, heavy, light int) *sched {
	s := &sched{quiet: quiet, fgLimit: max(fgLimit, 1), clock: time.Now}
	s.fgHeavy = max(1, s.fgLimit/4)
	s.limit[classHeavy], s.limit[classLight] = max(heavy, 1), max(light, 1)
	s.epoch = s.clock()
	return s
}

// fgBurst: the foreground is active while it made at least this many
// calls within the quiet window (a task that writes a line now and then
// does not hold uploads back).
const fgBurst = 8

// foreground records an operation of the task.
func (s *sched) foreground() {
	if s.quiet > 0 {
		n := s.opN.Add(1)
		now := s.clock()
		s.ops[n%fgBurst].Store(int64(now.Sub(s.epoch)) | 1) // never 0
		if s.node != nil {
			s.node.publishQuiet(now, s.quietAt)
		}
	}
}

// busy records a burst of the task's operations: the poller of external
// writes (pollExternal) saw the kernel write for it since its last look.
func (s *sched) busy() {
	for range fgBurst {
		s.foreground()
	}
}

// fgView is one reading of the clock and of the foreground's ops:
// dispatchLocked decides from one view, since foreground() runs without
// mu (two readings could see a quiet foreground, then a busy one).
type fgView struct {
	now     time.Time
	quiet   time.Time // when the foreground turned (or turns) quiet, own or the node's
	wasBusy bool      // quiet is set: the foreground was ever busy
	node    nodeView  // the other Managers' tasks
}

func (s *sched) view() fgView {
	v := fgView{now: s.clock()}
	v.quiet, v.wasBusy = s.quietAt()
	if s.node != nil {
		v.node = s.node.others(v.now)
		if !v.node.quiet.IsZero() && (!v.wasBusy || v.node.quiet.After(v.quiet)) {
			v.quiet, v.wasBusy = v.node.quiet, true
		}
	}
	return v
}

// busyUntil returns when the foreground, the own task's or another's on
// the node, turns quiet (if no other op comes); zero when it is quiet now.
func (v fgView) busyUntil() time.Time {
	if !v.wasBusy || !v.now.Before(v.quiet) {
		return time.Time{}
	}
	return v.quiet
}

// busyUntil returns when the foreground turns quiet (if no other op
// comes); zero when it is quiet now.
func (s *sched) busyUntil() time.Time { return s.view().busyUntil() }

// quietAt returns when the foreground turned (or turns, if no other op
// comes) quiet; false if it was never busy.
func (s *sched) quietAt() (time.Time, bool) {
	if s.quiet <= 0 {
		return time.Time{}, false
	}
	oldest := int64(math.MaxInt64) // of the last fgBurst ops
	for i := range s.ops {
		t := s.ops[i].Load()
		if t == 0 {
			return time.Time{}, false
		}
		oldest = min(oldest, t)
	}
	return s.epoch.Add(time.Duration(oldest) + s.quiet), true
}

// heavyBusyWait: while the foreground is busy, a heavy request starts only
// once it waited this long. On 2 cores, one large part in flight (hashing
// and sending it, and a local object server receiving it) took half the
// CPU and doubled the time of a burst of small files; so heavy requests
// wait for the task to pause, and a task that never does still sees its
// parts trickle (about one per heavyBusyWait).
const heavyBusyWait = 500 * time.Millisecond

// heavyRamp: once the foreground turns quiet, the heavy requests allowed
// in flight double every heavyRamp, from the foreground's limit up to
// Concurrency, so that a task pausing a moment (the next command
// starting: `dd …; cp …` paused 30–60 ms) does not find every large part
// started when it resumes: each takes much CPU for a while (with a 25 ms
// ramp, the cp after a dd took twice as long). Light requests are short,
// and a burst of them ends soon. A few parts in flight already use most
// of a small machine, so the ramp costs little when the task is done.
const heavyRamp = 100 * time.Millisecond

// heavyLimitLocked returns the heavy requests allowed in flight while the
// foreground is quiet (as of v), and when that grows next (zero: it is at
// Concurrency). Caller holds mu.
func (s *sched) heavyLimitLocked(v fgView) (int, time.Time) {
	full := s.limit[classHeavy]
	if s.syncs > 0 || (s.hurries > 0 && v.node.quiet.IsZero()) || !v.wasBusy {
		return full, time.Time{}
	}
	k := 1 + int(v.now.Sub(v.quiet)/heavyRamp)
	if k >= 30 || s.fgHeavy<<k >= full {
		return full, time.Time{}
	}
	return s.fgHeavy << k, v.quiet.Add(time.Duration(k) * heavyRamp)
}

// start waits for the turn of an upload attempt. Call done on the ticket
// when the attempt ends or waits for something else than a slot; pass it
// in the attempt's context (withTicket) so that its first request keeps
// the attempt's place. It fails with the cause of ctx.
func (s *sched) start(ctx context.Context) (*ticket, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.seq++
	t := &ticket{s: s, seq: s.seq, since: s.clock()}
	w := &waiter{class: -1, seq: t.seq, since: t.since, ready: make(chan struct{})}
	w.elem = s.starters.PushBack(w)
	s.dispatchLocked()
	s.mu.Unlock()
	select {
	case <-w.ready:
		return t, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.elem == nil { // started meanwhile
		s.mu.Unlock()
		t.done()
	} else {
		s.starters.Remove(w.elem)
		w.elem = nil
		s.dispatchLocked()
		s.mu.Unlock()
	}
	return nil, context.Cause(ctx)
}

// done ends the ticket, if its first request has not done so already.
func (t *ticket) done() {
	if t == nil {
		return
	}
	s := t.s
	s.mu.Lock()
	if !t.used {
		t.used = true
		s.tickets--
		s.dispatchLocked()
	}
	s.mu.Unlock()
}

// withTicket returns ctx carrying t for the attempt's requests.
func withTicket(ctx context.Context, t *ticket) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, ticketKey{}, t)
}

// acquire waits for a slot of class (release it with release), or fails
// with the cause of ctx.
func (s *sched) acquire(ctx context.Context, class int) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	s.mu.Lock()
	w := &waiter{class: class, ready: make(chan struct{})}
	if t != nil && !t.used && t.s == s {
		// The attempt's first request: in the queue from the attempt's arrival.
		t.used = true
		s.tickets--
		w.seq, w.since = t.seq, t.since
	} else {
		s.seq++
		w.seq, w.since = s.seq, s.clock()
	}
	l := &s.waiting[class]
	e := l.Back()
	for e != nil && e.Value.(*waiter).seq > w.seq {
		e = e.Prev()
	}
	if e == nil {
		w.elem = l.PushFront(w)
	} else {
		w.elem = l.InsertAfter(w, e)
	}
	s.queued++
	s.dispatchLocked()
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.elem == nil { // admitted meanwhile: give the slot back
		s.mu.Unlock()
		s.release(class)
	} else {
		l.Remove(w.elem)
		w.elem = nil
		s.queued--
		s.dispatchLocked() // w may have held back others (arrival order)
		s.mu.Unlock()
	}
	return context.Cause(ctx)
}

// release ends a request of class admitted by acquire.
func (s *sched) release(class int) {
	s.mu.Lock()
	s.inflight[class]--
	s.publishLocked()
	s.dispatchLocked()
	s.mu.Unlock()
}

// hurry lifts the foreground limit until the returned func is called (a
// Sync, isSync true, or Drain waits for uploads; see busyUntilFor).
func (s *sched) hurry(isSync bool) (done func()) {
	n := 0
	if isSync {
		n = 1
	}
	s.mu.Lock()
	s.hurries++
	s.syncs += n
	s.dispatchLocked()
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hurries--
			s.syncs -= n
			s.mu.Unlock()
		})
	}
}

// stop stops the timer (Manager.Close; waiters end with their contexts).
func (s *sched) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	if s.node != nil {
		s.node.close()
	}
}

// dispatchLocked admits every request and starts every attempt that may
// go now. Caller holds mu.
func (s *sched) dispatchLocked() {
	v := s.view()
	until := v.busyUntilFor(s.hurries, s.syncs) // when the foreground turns quiet; zero: quiet now, or a Sync waits
	if until.IsZero() {
		heavy, grows := s.heavyLimitLocked(v)
		for c := range numClasses {
			limit := s.limit[c]
			if c == classHeavy {
				limit = heavy
			}
			for s.inflight[c] < limit && s.waiting[c].Len() > 0 {
				s.admitLocked(s.waiting[c].Front().Value.(*waiter))
			}
		}
		// Attempts, while fewer wait for a slot than there are slots: more
		// would only contend with each other to prepare.
		for s.starters.Len() > 0 && s.queued+s.tickets < s.limit[classHeavy]+s.limit[classLight] {
			s.admitLocked(s.starters.Front().Value.(*waiter))
		}
		if s.waiting[classHeavy].Len() > 0 && !grows.IsZero() {
			s.armLocked(grows)
		}
		return
	}
	// Requests, oldest first, while fewer than fgLimit are in flight, at
	// most fgHeavy of them heavy, and a heavy one only once it waited
	// heavyBusyWait (a light one may pass a heavy one held back).
	// The limits hold for the node: other Managers' requests count.
	now := v.now
	var aged time.Time // when the heavy request held back by its age may go
	for v.node.total+s.inflight[classHeavy]+s.inflight[classLight] < s.fgLimit {
		var next *waiter
		for c := range numClasses {
			e := s.waiting[c].Front()
			if e == nil || s.inflight[c] >= s.limit[c] || (c == classHeavy && v.node.heavy+s.inflight[c] >= s.fgHeavy) {
				continue
			}
			w := e.Value.(*waiter)
			if c == classHeavy && now.Sub(w.since) < heavyBusyWait {
				aged = w.since.Add(heavyBusyWait)
				continue
			}
			if next == nil || w.seq < next.seq {
				next = w
			}
		}
		if next == nil {
			break
		}
		s.admitLocked(next)
	}
	if !aged.IsZero() {
		s.armLocked(aged)
	}
	// Attempts, while few requests wait (the queue stays short), or when
	// the oldest attempt is older than every request waiting (so that a
	// stream of new requests, such as the parts of a large file being
	// written, does not hold it back for good).
	for e := s.starters.Front(); e != nil; e = s.starters.Front() {
		w := e.Value.(*waiter)
		old := s.oldestLocked()
		if s.queued+s.tickets >= s.fgLimit && (s.tickets > 0 || (old != nil && old.seq < w.seq)) {
			break
		}
		s.admitLocked(w)
	}
	if s.queued > 0 || s.starters.Len() > 0 {
		// Held back by the foreground: look again when it may have
		// turned quiet (a release or a Sync may come first), or, while
		// other Managers' requests hold it back, when they may have
		// ended.
		s.armLocked(until)
		if s.queued > 0 && v.node.total > 0 {
			s.armLocked(now.Add(nodePoll))
		}
	}
}

// armLocked makes the timer dispatch again at t (or earlier). Caller
// holds mu.
func (s *sched) armLocked(t time.Time) {
	if s.stopped || (!s.timerAt.IsZero() && !s.timerAt.After(t)) {
		return
	}
	s.timerAt = t
	d := t.Sub(s.clock())
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.onTimer)
	} else {
		s.timer.Reset(d)
	}
}

// oldestLocked returns the request that waits the longest, or nil.
func (s *sched) oldestLocked() *waiter {
	var first *waiter
	for c := range numClasses {
		if e := s.waiting[c].Front(); e != nil {
			if w := e.Value.(*waiter); first == nil || w.seq < first.seq {
				first = w
			}
		}
	}
	return first
}

func (s *sched) onTimer() {
	s.mu.Lock()
	s.timerAt = time.Time{}
	s.dispatchLocked()
	s.mu.Unlock()
}

// admitLocked admits the request or starts the attempt w.
func (s *sched) admitLocked(w *waiter) {
	if w.class < 0 {
		s.starters.Remove(w.elem)
		s.tickets++
	} else {
		s.waiting[w.class].Remove(w.elem)
		s.queued--
		s.inflight[w.class]++
		s.publishLocked()
	}
	w.elem = nil
	close(w.ready)
}
