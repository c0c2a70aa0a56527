package metrics

import "github.com/prometheus/client_golang/prometheus"

// DirReadaheadSnapshot is a point-in-time view of directory readahead
// (supervise converts block.PredictStats into it). Counters are totals
// since ferry started.
type DirReadaheadSnapshot struct {
	Files          int64 // files predicted (something fetched ahead of their open)
	PredictedBytes int64 // bytes fetched into the cache before the task read them
	HitBytes       int64 // of those, bytes the task then read without waiting
	WastedBytes    int64 // predicted bytes never read (counted once their prediction retired)
}

// NewDirReadahead registers the directory-readahead collectors on reg;
// snap is called once per scrape and must be safe for concurrent use
// and cheap:
//
//	ferry_dir_readahead_files_total
//	ferry_dir_readahead_predicted_bytes_total
//	ferry_dir_readahead_hit_bytes_total
//	ferry_dir_readahead_wasted_bytes_total
//
// It panics, like prometheus.MustRegister, when reg already holds them.
func NewDirReadahead(reg prometheus.Registerer, snap func() DirReadaheadSnapshot) {
	type S = DirReadaheadSnapshot
	reg.MustRegister(&snapshotCollector[S]{
		snap: snap,
		fields: []field[S]{
			counterField("ferry_dir_readahead_files_total", "Files fetched into the cache before the task opened them (directory readahead).",
				func(s S) float64 { return float64(s.Files) }),
			counterField("ferry_dir_readahead_predicted_bytes_total", "Bytes fetched by directory readahead before the task read them.",
				func(s S) float64 { return float64(s.PredictedBytes) }),
			counterField("ferry_dir_readahead_hit_bytes_total", "Predicted bytes the task then read from the cache without waiting.",
				func(s S) float64 { return float64(s.HitBytes) }),
			counterField("ferry_dir_readahead_wasted_bytes_total", "Predicted bytes the task never read (counted two minutes after the prediction, or when the task exits).",
				func(s S) float64 { return float64(s.WastedBytes) }),
		},
	})
}
