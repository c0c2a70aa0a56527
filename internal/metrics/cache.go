package metrics

import "github.com/prometheus/client_golang/prometheus"

// CacheSnapshot is a point-in-time view of the block cache and its
// readahead. supervise fills it from block.Stats (metrics does not import
// the cache). Counters are totals since the cache was opened.
type CacheSnapshot struct {
	Hits   int64 // block lookups served from disk
	Misses int64 // block lookups that had to fetch
	// HitBytes are bytes served to readers from cached blocks;
	// NetworkBytes are bytes fetched from the object store into the cache.
	HitBytes, NetworkBytes int64
	// PrefetchedBytes are the part of NetworkBytes fetched ahead of reads
	// (readahead and Prefetch).
	PrefetchedBytes  int64
	Evictions        int64 // blocks evicted
	EvictedBytes     int64 // their bytes
	ChecksumFailures int64 // blocks dropped because their checksum failed
	CachedBytes      int64 // bytes of blocks on disk now
	LimitBytes       int64 // the byte limit
	FreeBytes        int64 // free space on the cache's file system
	// ReadaheadWindowBytes is the largest readahead window of the open
	// readers (0 when none reads sequentially).
	ReadaheadWindowBytes int64
	InflightFetches      int64 // ranged GETs running now
}

// NewCache registers the block-cache collectors on reg; snap is called
// once per scrape and must be safe for concurrent use and cheap:
//
//	ferry_cache_hits_total, ferry_cache_misses_total
//	ferry_cache_hit_bytes_total, ferry_cache_network_bytes_total
//	ferry_cache_evictions_total, ferry_cache_evicted_bytes_total
//	ferry_cache_checksum_failures_total
//	ferry_cache_cached_bytes, ferry_cache_limit_bytes, ferry_cache_disk_free_bytes
//	ferry_cache_inflight_fetches
//	ferry_readahead_window_bytes, ferry_readahead_prefetched_bytes_total
//
// It panics, like prometheus.MustRegister, when reg already holds them.
func NewCache(reg prometheus.Registerer, snap func() CacheSnapshot) {
	type S = CacheSnapshot
	reg.MustRegister(&snapshotCollector[S]{
		snap: snap,
		fields: []field[S]{
			counterField("ferry_cache_hits_total", "Block lookups served from the disk cache.",
				func(s S) float64 { return float64(s.Hits) }),
			counterField("ferry_cache_misses_total", "Block lookups that fetched from the object store.",
				func(s S) float64 { return float64(s.Misses) }),
			counterField("ferry_cache_hit_bytes_total", "Bytes served to readers from cached blocks.",
				func(s S) float64 { return float64(s.HitBytes) }),
			counterField("ferry_cache_network_bytes_total", "Bytes fetched from the object store into the cache.",
				func(s S) float64 { return float64(s.NetworkBytes) }),
			counterField("ferry_cache_evictions_total", "Blocks evicted (byte limit or free-space floor).",
				func(s S) float64 { return float64(s.Evictions) }),
			counterField("ferry_cache_evicted_bytes_total", "Bytes of evicted blocks.",
				func(s S) float64 { return float64(s.EvictedBytes) }),
			counterField("ferry_cache_checksum_failures_total", "Blocks dropped because their checksum failed.",
				func(s S) float64 { return float64(s.ChecksumFailures) }),
			gaugeField("ferry_cache_cached_bytes", "Bytes of blocks on disk.",
				func(s S) float64 { return float64(s.CachedBytes) }),
			gaugeField("ferry_cache_limit_bytes", "Byte limit of the block cache.",
				func(s S) float64 { return float64(s.LimitBytes) }),
			gaugeField("ferry_cache_disk_free_bytes", "Free space on the cache's file system.",
				func(s S) float64 { return float64(s.FreeBytes) }),
			gaugeField("ferry_cache_inflight_fetches", "Ranged GETs running now.",
				func(s S) float64 { return float64(s.InflightFetches) }),
			gaugeField("ferry_readahead_window_bytes", "Largest readahead window of the open readers.",
				func(s S) float64 { return float64(s.ReadaheadWindowBytes) }),
			counterField("ferry_readahead_prefetched_bytes_total", "Bytes fetched ahead of reads (readahead and prefetch).",
				func(s S) float64 { return float64(s.PrefetchedBytes) }),
		},
	})
}
