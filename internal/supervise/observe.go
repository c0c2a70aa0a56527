package supervise

import (
	"context"
	"log/slog"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// observer bundles the metrics of one ferry process: the backend
// counters the stores report to, the cache and write-back collectors, and
// the optional /metrics listener. Create it before the stores (newObserver),
// attach the caches once they exist, close it last.
type observer struct {
	reg       *metrics.Registry
	backend   *metrics.Backend
	writeback *metrics.Writeback // nil until attach
	srv       *metrics.Server    // nil unless serve was called
}

// newObserver registers the backend collectors on reg.
func newObserver(reg *metrics.Registry) *observer {
	return &observer{reg: reg, backend: metrics.NewBackend(reg)}
}

// wrapStore instruments a retry-decorated store of provider.
func (o *observer) wrapStore(st objstore.Store, provider string, log *slog.Logger) objstore.Store {
	return Instrument(st, InstrumentOptions{Metrics: o.backend, Provider: provider, Logger: log})
}

// retryHook counts retries of provider, then calls next.
func (o *observer) retryHook(provider string, next func(op string, attempt int, err error)) func(op string, attempt int, err error) {
	return RetryHook(o.backend, provider, next)
}

// attach registers the block-cache and write-back collectors.
func (o *observer) attach(blocks *block.Cache, wb *writeback.Manager) {
	metrics.NewCache(o.reg, cacheSnapshot(blocks))
	o.writeback = metrics.NewWriteback(o.reg, writebackSnapshot(wb), metrics.WritebackOptions{})
}

// serve starts the /metrics listener on addr ("" = none) until ctx ends
// or close. A bind error is returned (a start-up failure).
func (o *observer) serve(ctx context.Context, addr string) error {
	if addr == "" {
		return nil
	}
	srv, err := metrics.Serve(ctx, addr, o.reg)
	if err != nil {
		return err
	}
	o.srv = srv
	return nil
}

// startDrain marks the drain's start on the drain gauges; call the
// result when it ends.
func (o *observer) startDrain() func() {
	done := o.writeback.StartDrain()
	return func() { done() }
}

// close stops the listener (scrapes in flight get a short grace).
func (o *observer) close() {
	if o.srv != nil {
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
	}
	if wb != nil {
		ws := wb.Stats()
		s.BytesUploaded = ws.UploadedBytes
		s.ObjectsUploaded = ws.UploadedObjects
		s.NotDurableFiles = ws.PendingFiles
		s.Retries += ws.Retries
	}
	s.DrainSeconds = o.writeback.DrainDuration().Seconds()
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
			Blocks: s.Blocks, BytesCached: s.BytesCached, MaxBytes: s.MaxBytes, FreeBytes: s.FreeBytes,
			ReadaheadWindow: s.ReadaheadWindow, MemoryInUse: s.MemoryInUse, OpenReaders: s.OpenReaders,
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

// drainPending adapts writeback.Stats to WatchDrain's pending function.
func drainPending(m *writeback.Manager) func() (int, int64) {
	return func() (int, int64) {
		s := m.Stats()
		return s.PendingFiles, s.PendingBytes
	}
}
