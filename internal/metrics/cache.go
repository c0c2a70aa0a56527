package metrics

import "github.com/prometheus/client_golang/prometheus"

// CacheSnapshot is a point-in-time view of the block cache and its
// readahead. It mirrors block.Stats field for field (supervise converts
// one into the other; metrics does not import the cache). Counters are
// totals since the cache was opened.
type CacheSnapshot struct {
	Hits             int64 // reads served without waiting for the network
	Misses           int64 // reads that waited for at least one fetch
	BytesFromCache   int64 // bytes returned to readers from cached blocks
	BytesFromNetwork int64 // bytes returned to readers that had to be fetched first
	BytesFetched     int64 // bytes downloaded from stores
	PrefetchedBytes  int64 // of BytesFetched, downloaded ahead of reads
	Fetches          int64 // ranged GETs started
	FetchesInFlight  int64 // ranged GETs running now
	QueuedFetches    int64 // fetches waiting for a worker
	Evictions        int64 // blocks evicted
	EvictedBytes     int64 // their bytes
	Corruptions      int64 // blocks dropped because their checksum failed
	Objects          int64 // object versions with files on disk
	BytesCached      int64 // their on-disk size
	MaxBytes         int64 // the byte limit
	FreeBytes        int64 // free space of the cache's file system
	ReadaheadWindow  int64 // sum of the open readers' readahead windows
	MemoryInUse      int64 // bytes of fetch buffers allocated
	OpenReaders      int64 // readers open now
	PassthroughBytes int64 // sizes of the cache files opens were served from by the kernel (passthrough)
	ColdOpens        int64 // passthrough opens of files not yet whole (cold passthrough)
	ColdFiles        int64 // files opened cold that back passthrough opens now
	ColdEvents       int64 // reads of cold files the kernel asked ferry about
	ColdWaits        int64 // of those, reads that waited for a fetch
	ColdDenied       int64 // of those, reads failed with EIO
	ClaimWaits       int64 // blocks another process sharing the cache dir was fetching, waited for instead of fetched
	FreshBlocks      int64 // blocks another process fetched while this one watched them absent, taken unchecked
}

// NewCache registers the block-cache collectors on reg; snap is called
// once per scrape and must be safe for concurrent use and cheap:
//
//	ferry_cache_hits_total, ferry_cache_misses_total
//	ferry_cache_hit_bytes_total, ferry_cache_miss_bytes_total
//	ferry_cache_fetched_bytes_total, ferry_cache_fetches_total
//	ferry_cache_inflight_fetches, ferry_cache_queued_fetches
//	ferry_cache_evictions_total, ferry_cache_evicted_bytes_total
//	ferry_cache_checksum_failures_total
//	ferry_cache_stored_objects, ferry_cache_cached_bytes, ferry_cache_limit_bytes
//	ferry_cache_disk_free_bytes, ferry_cache_buffer_bytes, ferry_cache_open_readers
//	ferry_readahead_window_bytes, ferry_readahead_prefetched_bytes_total
//	ferry_cache_cold_opens_total, ferry_cache_cold_files
//	ferry_cache_precontent_events_total, ferry_cache_precontent_waits_total, ferry_cache_precontent_denied_total
//	ferry_cache_claim_waits_total, ferry_cache_fresh_blocks_total
//
// It panics, like prometheus.MustRegister, when reg already holds them.
func NewCache(reg prometheus.Registerer, snap func() CacheSnapshot) {
	type S = CacheSnapshot
	f := func(v func(S) int64) func(S) float64 { return func(s S) float64 { return float64(v(s)) } }
	reg.MustRegister(&snapshotCollector[S]{
		snap: snap,
		fields: []field[S]{
			counterField("ferry_cache_hits_total", "Reads served from the disk cache without waiting for the network.",
				f(func(s S) int64 { return s.Hits })),
			counterField("ferry_cache_misses_total", "Reads that waited for at least one fetch.",
				f(func(s S) int64 { return s.Misses })),
			counterField("ferry_cache_hit_bytes_total", "Bytes returned to readers from cached blocks.",
				f(func(s S) int64 { return s.BytesFromCache })),
			counterField("ferry_cache_miss_bytes_total", "Bytes returned to readers that had to be fetched first.",
				f(func(s S) int64 { return s.BytesFromNetwork })),
			counterField("ferry_cache_fetched_bytes_total", "Bytes downloaded from the object store into the cache.",
				f(func(s S) int64 { return s.BytesFetched })),
			counterField("ferry_cache_fetches_total", "Ranged GETs started by the cache.",
				f(func(s S) int64 { return s.Fetches })),
			gaugeField("ferry_cache_inflight_fetches", "Ranged GETs running now.",
				f(func(s S) int64 { return s.FetchesInFlight })),
			gaugeField("ferry_cache_queued_fetches", "Fetches waiting for a worker.",
				f(func(s S) int64 { return s.QueuedFetches })),
			counterField("ferry_cache_evictions_total", "Objects evicted whole (byte limit or free-space floor).",
				f(func(s S) int64 { return s.Evictions })),
			counterField("ferry_cache_evicted_bytes_total", "Bytes of evicted objects.",
				f(func(s S) int64 { return s.EvictedBytes })),
			counterField("ferry_cache_checksum_failures_total", "Blocks dropped because their checksum failed.",
				f(func(s S) int64 { return s.Corruptions })),
			counterField("ferry_cache_passthrough_bytes_total", "Sizes of the cache files handed to the kernel for passthrough opens (their reads never reach ferry; this is the most they can have read).",
				f(func(s S) int64 { return s.PassthroughBytes })),
			gaugeField("ferry_cache_stored_objects", "Objects (versions) with cached bytes on disk.",
				f(func(s S) int64 { return s.Objects })),
			gaugeField("ferry_cache_cached_bytes", "On-disk bytes of cached blocks.",
				f(func(s S) int64 { return s.BytesCached })),
			gaugeField("ferry_cache_limit_bytes", "Byte limit of the block cache.",
				f(func(s S) int64 { return s.MaxBytes })),
			gaugeField("ferry_cache_disk_free_bytes", "Free space on the cache's file system.",
				f(func(s S) int64 { return s.FreeBytes })),
			gaugeField("ferry_cache_buffer_bytes", "Bytes of fetch buffers in RAM.",
				f(func(s S) int64 { return s.MemoryInUse })),
			gaugeField("ferry_cache_open_readers", "Cache readers open now.",
				f(func(s S) int64 { return s.OpenReaders })),
			gaugeField("ferry_readahead_window_bytes", "Sum of the open readers' readahead windows.",
				f(func(s S) int64 { return s.ReadaheadWindow })),
			counterField("ferry_readahead_prefetched_bytes_total", "Bytes fetched ahead of reads (readahead and prefetch).",
				f(func(s S) int64 { return s.PrefetchedBytes })),
			counterField("ferry_cache_cold_opens_total", "Passthrough opens of files not yet wholly cached (cold passthrough: the kernel asks ferry for each missing range).",
				f(func(s S) int64 { return s.ColdOpens })),
			gaugeField("ferry_cache_cold_files", "Cache files opened cold that back passthrough opens now.",
				f(func(s S) int64 { return s.ColdFiles })),
			counterField("ferry_cache_precontent_events_total", "Reads of cold passthrough files the kernel asked ferry about (fanotify pre-content events).",
				f(func(s S) int64 { return s.ColdEvents })),
			counterField("ferry_cache_precontent_waits_total", "Of those, reads that waited for a fetch.",
				f(func(s S) int64 { return s.ColdWaits })),
			counterField("ferry_cache_precontent_denied_total", "Of those, reads failed with EIO (the fetch failed).",
				f(func(s S) int64 { return s.ColdDenied })),
			counterField("ferry_cache_claim_waits_total", "Blocks another process sharing the cache dir was fetching, waited for instead of fetched.",
				f(func(s S) int64 { return s.ClaimWaits })),
			counterField("ferry_cache_fresh_blocks_total", "Blocks another process fetched while this one watched them absent, taken as verified without re-reading them.",
				f(func(s S) int64 { return s.FreshBlocks })),
		},
	})
}
