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

// DrainWatch reports the progress of a drain from a polling goroutine,
// which it owns: Stop ends it.
type DrainWatch struct {
	stop chan struct{}
	done chan struct{} // closed when the goroutine has returned
	once sync.Once     // guards closing stop
}

// WatchDrain starts reporting the drain to report, once it has lasted
// opts.Delay: Done is the bytes that left the queue since WatchDrain was
// called, Total that plus what pending still reports. pending returns the
// files and bytes not yet durable (writeback.Stats().PendingFiles and
// PendingBytes); it is polled every opts.Interval. Call Stop when the
// drain returns. A nil report makes WatchDrain a no-op.
func WatchDrain(pending func() (files int, bytes int64), report ProgressFunc, opts DrainWatchOptions) *DrainWatch {
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
	t0 := opts.Now()
	files0, bytes0 := pending()
	go w.run(pending, report, opts, t0, files0, bytes0) // owner: w (Stop)
	return w
}

func (w *DrainWatch) run(pending func() (int, int64), report ProgressFunc, opts DrainWatchOptions, t0 time.Time, files0 int, bytes0 int64) {
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
	total, filesTotal := bytes0, files0
	var done int64
	var filesDone int
	sample := func(final bool) {
		files, bytes := pending()
		// The queue may grow (a file closed late): Done and Total never
		// shrink, and Total covers what is done plus what is pending.
		done = max(done, total-bytes)
		total = max(total, done+bytes)
		filesDone = max(filesDone, filesTotal-files)
		filesTotal = max(filesTotal, filesDone+files)
		report(Progress{
			Op: "drain", Done: done, Total: total, Files: filesDone, FilesTotal: filesTotal,
			Elapsed: opts.Now().Sub(t0), Final: final,
		})
	}
	sample(false)
	for {
		select {
		case <-w.stop:
			sample(true)
			return
		case <-tick.C:
			sample(false)
		}
	}
}

// Stop ends the reports (with a Final one if any was made) and waits for
// the goroutine. It is safe to call more than once.
func (w *DrainWatch) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}
