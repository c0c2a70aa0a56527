package supervise

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// observer bundles the metrics of one ferry process: the backend
// counters the stores report to, the cache and write-back collectors, the
// optional /metrics listener, and what the exit summary needs (task
// timing, drain progress). Create it before the stores (newObserver),
// attach the caches once they exist, close it last. Its fields are
// written by the goroutine running the lifecycle (Run/Mount) only, before
// any reader: no lock.
type observer struct {
	reg       *metrics.Registry
	backend   *metrics.Backend
	writeback *metrics.Writeback // nil until attach
	srv       *metrics.Server    // nil unless serve was called

	started  time.Time    // newObserver: the start of ferry's run
	progress ProgressFunc // renders a long drain; nil: none
	stderr   io.Writer    // where the summary line goes; default os.Stderr
	cpu0     CPUTimes     // RUSAGE_CHILDREN before the task started
	taskT0   time.Time    // when the task started
	task     Summary      // TaskSeconds and CPU fields, set by taskEnded
	// stage is the task's input staging (nil when off); /metrics reads it
	// from other goroutines.
	stage atomic.Pointer[staging]
	// dirReadahead: directory readahead is on (the summary reports it).
	dirReadahead bool
}

// newObserver registers the backend collectors on reg.
func newObserver(reg *metrics.Registry) *observer {
	return &observer{reg: reg, backend: metrics.NewBackend(reg), started: time.Now(), stderr: os.Stderr}
}

// wrapStore instruments a retry-decorated store of provider (a nil
// observer returns st unchanged).
func (o *observer) wrapStore(st objstore.Store, provider string, log *slog.Logger) objstore.Store {
	if o == nil {
		return st
	}
	return Instrument(st, InstrumentOptions{Metrics: o.backend, Provider: provider, Logger: log})
}

// retryHook counts retries of provider, then calls next (a nil observer
// returns next).
func (o *observer) retryHook(provider string, next func(op string, attempt int, err error)) func(op string, attempt int, err error) {
	if o == nil {
		return next
	}
	return RetryHook(o.backend, provider, next)
}

// attach registers the block-cache and write-back collectors.
func (o *observer) attach(blocks *block.Cache, wb *writeback.Manager) {
	metrics.NewCache(o.reg, cacheSnapshot(blocks))
	metrics.NewStage(o.reg, func() metrics.StageSnapshot { return o.stage.Load().snapshot() })
	metrics.NewDirReadahead(o.reg, func() metrics.DirReadaheadSnapshot {
		p := blocks.PredictStats()
		return metrics.DirReadaheadSnapshot{Files: p.Files, PredictedBytes: p.PredictedBytes, HitBytes: p.HitBytes, WastedBytes: p.WastedBytes}
	})
	o.writeback = metrics.NewWriteback(o.reg, writebackSnapshot(wb), metrics.WritebackOptions{})
}

// serve starts the /metrics listener on addr ("" = none) until close. A
// bind error is returned (a start-up failure).
func (o *observer) serve(addr string) error {
	if addr == "" {
		return nil
	}
	srv, err := metrics.Serve(context.Background(), addr, o.reg)
	if err != nil {
		return err
	}
	o.srv = srv
	return nil
}

// taskStarting records the CPU time of earlier children and the start
// time; call it just before starting the task.
func (o *observer) taskStarting() {
	o.cpu0, _ = ChildrenCPU()
	o.taskT0 = time.Now()
}

// taskEnded records the task's wall and CPU time once it was waited for.
func (o *observer) taskEnded(ps *os.ProcessState) {
	o.task.TaskSeconds = time.Since(o.taskT0).Seconds()
	o.task.SetCPU(TaskCPU(ps, o.cpu0))
}

// drain runs wb.Drain(ctx), timing it on the drain gauges and reporting
// its progress to o.progress when it lasts more than a few seconds.
func (o *observer) drain(ctx context.Context, wb *writeback.Manager) error {
	end := o.writeback.StartDrain()
	watch := WatchDrain(drainState(wb), o.progress, DrainWatchOptions{})
	err := wb.Drain(ctx)
	watch.Stop()
	end()
	return err
}

// summarize builds the exit summary (code, or ExitNotDurable when derr is
// not nil), writes it as one JSON line to stderr and returns the line
// (for $FUSION_WORK/.fusion/summary.json). Call it after the drain and
// before the caches are closed.
func (o *observer) summarize(blocks *block.Cache, wb *writeback.Manager, code int, derr error) []byte {
	s := o.task
	if derr != nil {
		code = ExitNotDurable
	}
	s.ExitCode = code
	o.fillSummary(&s, blocks, wb)
	s.WallSeconds = time.Since(o.started).Seconds()
	b := s.JSON()
	_, _ = o.stderr.Write(b)
	return b
}

// close stops the listener (scrapes in flight get a short grace). It is
// safe on a nil observer and more than once.
func (o *observer) close() {
	if o != nil && o.srv != nil {
		o.srv.Close()
		o.srv = nil
	}
}

// fillSummary sets the data-movement fields of s from the collectors and
// the caches: bytes read from cache and network, bytes and objects
// uploaded, files left pending, drain time, retries and errors. The
// caller sets the exit code, wall and CPU times.
func (o *observer) fillSummary(s *Summary, blocks *block.Cache, wb *writeback.Manager) {
	bt := o.backend.Totals()
	s.Retries = bt.Retries
	s.Errors = bt.Failures
	s.BytesDownloaded = bt.ReadBytes
	if blocks != nil {
		cs := blocks.Stats()
		s.BytesReadCache = cs.BytesFromCache
		s.BytesReadNetwork = cs.BytesFromNetwork
		s.PassthroughFiles = cs.PassthroughOpens
		s.BytesPassthrough = cs.PassthroughBytes
		s.ColdFiles, s.ReadsDenied = cs.ColdOpens, cs.ColdDenied
		if o.dirReadahead {
			// The task ended: what it did not read of the predictions is wasted.
			p := blocks.SettlePredictions()
			s.DirReadahead = &DirReadaheadSummary{Files: p.Files, PredictedBytes: p.PredictedBytes, HitBytes: p.HitBytes, WastedBytes: p.WastedBytes}
		}
	}
	if wb != nil {
		ws := wb.Stats()
		s.BytesUploaded = ws.UploadedBytes
		s.ObjectsUploaded = ws.UploadedObjects
		s.NotDurableFiles = ws.PendingFiles
		s.Retries += ws.Retries
	}
	s.DrainSeconds = o.writeback.DrainDuration().Seconds()
	s.Stage = o.stage.Load().summary()
}

// cacheSnapshot adapts block.Stats to metrics.CacheSnapshot.
func cacheSnapshot(c *block.Cache) func() metrics.CacheSnapshot {
	return func() metrics.CacheSnapshot {
		s := c.Stats()
		return metrics.CacheSnapshot{
			Hits: s.Hits, Misses: s.Misses,
			BytesFromCache: s.BytesFromCache, BytesFromNetwork: s.BytesFromNetwork,
			BytesFetched: s.BytesFetched, PrefetchedBytes: s.PrefetchedBytes,
			Fetches: s.Fetches, FetchesInFlight: s.FetchesInFlight, QueuedFetches: s.QueuedFetches,
			Evictions: s.Evictions, EvictedBytes: s.EvictedBytes, Corruptions: s.Corruptions,
			Objects: s.Objects, BytesCached: s.BytesCached, MaxBytes: s.MaxBytes, FreeBytes: s.FreeBytes,
			ReadaheadWindow: s.ReadaheadWindow, MemoryInUse: s.MemoryInUse, OpenReaders: s.OpenReaders,
			PassthroughBytes: s.PassthroughBytes,
			ColdOpens:        s.ColdOpens, ColdFiles: s.ColdFiles, ColdEvents: s.ColdEvents,
			ColdWaits: s.ColdWaits, ColdDenied: s.ColdDenied,
			ClaimWaits: s.ClaimWaits, FreshBlocks: s.FreshBlocks,
		}
	}
}

// writebackSnapshot adapts writeback.Stats to metrics.WritebackSnapshot.
func writebackSnapshot(m *writeback.Manager) func() metrics.WritebackSnapshot {
	return func() metrics.WritebackSnapshot {
		s := m.Stats()
		return metrics.WritebackSnapshot{
			PendingFiles: s.PendingFiles, PendingBytes: s.PendingBytes, OldestPending: s.OldestPending,
			UploadedBytes: s.UploadedBytes, UploadedObjects: s.UploadedObjects,
			Retries: s.Retries, Failures: s.Failures,
		}
	}
}

// drainState adapts writeback.Stats to WatchDrain's state function.
func drainState(m *writeback.Manager) func() DrainState {
	return func() DrainState {
		s := m.Stats()
		return DrainState{PendingFiles: s.PendingFiles, PendingBytes: s.PendingBytes, UploadedBytes: s.UploadedBytes}
	}
}
