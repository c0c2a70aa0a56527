package supervise

import (
	"sync"
	"time"
)

// Progress is a point-in-time view of a long transfer (a prefetch or the
// exit drain), handed to a ProgressFunc. The command line renders it as a
// progress bar on a terminal and as periodic log lines otherwise.
type Progress struct {
	Op         string        // "prefetch" or "drain"
	Done       int64         // bytes done
	Total      int64         // bytes in all (it may grow during a drain)
	Files      int           // files done
	FilesTotal int           // files in all
	Elapsed    time.Duration // since the transfer started
	// Final marks the last report of this transfer.
	Final bool
}

// ProgressFunc receives progress reports. Calls for one transfer are
// serialized; it must not block for long.
type ProgressFunc func(Progress)

// Defaults of DrainWatchOptions.
const (
	DefaultDrainProgressDelay    = 3 * time.Second
	DefaultDrainProgressInterval = 250 * time.Millisecond
)

// DrainWatchOptions configure WatchDrain.
type DrainWatchOptions struct {
	// Delay: a drain that ends sooner reports nothing. Default 3 s.
	Delay time.Duration
	// Interval between reports. Default 250 ms.
	Interval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DrainState is what WatchDrain polls: the write-back queue's pending
// files and bytes, and its cumulative uploaded bytes
// (writeback.Stats().PendingFiles, PendingBytes and UploadedBytes).
type DrainState struct {
	PendingFiles  int
	PendingBytes  int64
	UploadedBytes int64
}

// DrainWatch reports the progress of a drain from a polling goroutine,
// which it owns: Stop ends it.
type DrainWatch struct {
	stop chan struct{}
	done chan struct{} // closed when the goroutine has returned
	once sync.Once     // guards closing stop
}

// WatchDrain starts reporting the drain to report once it has lasted
// opts.Delay, polling state every opts.Interval. Total is the bytes
// pending when WatchDrain was called, grown by whatever joins the queue
// later; Done is the bytes uploaded since then, or the bytes that left
// the queue when that is more (server-side copies upload nothing), and
// reaches Total when the queue is empty. Done and Total never shrink.
// Call Stop when the drain returns. A nil report makes WatchDrain a
// no-op.
func WatchDrain(state func() DrainState, report ProgressFunc, opts DrainWatchOptions) *DrainWatch {
	w := &DrainWatch{stop: make(chan struct{}), done: make(chan struct{})}
	if report == nil {
		close(w.done)
		return w
	}
	if opts.Delay <= 0 {
		opts.Delay = DefaultDrainProgressDelay
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultDrainProgressInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &drainTally{t0: opts.Now(), first: state()}
	t.prev, t.total, t.filesTotal = t.first, t.first.PendingBytes, t.first.PendingFiles
	go w.run(state, report, opts, t) // owner: w (Stop)
	return w
}

// drainTally turns successive DrainStates into Progress. Only the
// watcher's goroutine uses it.
type drainTally struct {
	t0          time.Time
	first, prev DrainState
	done, total int64
	filesDone   int
	filesTotal  int
}

func (t *drainTally) next(s DrainState, now time.Time, final bool) Progress {
	// Files or bytes that joined the queue grow the totals.
	t.total += max(0, s.PendingBytes-t.prev.PendingBytes)
	t.filesTotal += max(0, s.PendingFiles-t.prev.PendingFiles)
	t.prev = s
	left := t.total - s.PendingBytes
	sent := min(s.UploadedBytes-t.first.UploadedBytes, t.total)
	t.done = max(t.done, left, sent)
	if s.PendingFiles == 0 {
		t.done = t.total
	}
	t.filesDone = max(t.filesDone, t.filesTotal-s.PendingFiles)
	return Progress{
		Op: "drain", Done: t.done, Total: t.total, Files: t.filesDone, FilesTotal: t.filesTotal,
		Elapsed: now.Sub(t.t0), Final: final,
	}
}

func (w *DrainWatch) run(state func() DrainState, report ProgressFunc, opts DrainWatchOptions, t *drainTally) {
	defer close(w.done)
	delay := time.NewTimer(opts.Delay)
	defer delay.Stop()
	select {
	case <-w.stop:
		return // a quick drain: nothing to show
	case <-delay.C:
	}
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	report(t.next(state(), opts.Now(), false))
	for {
		select {
		case <-w.stop:
			report(t.next(state(), opts.Now(), true))
			return
		case <-tick.C:
			report(t.next(state(), opts.Now(), false))
		}
	}
}

// Stop ends the reports (with a Final one if any was made) and waits for
// the goroutine. It is safe to call more than once.
func (w *DrainWatch) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}
