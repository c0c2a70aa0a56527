package metrics

import "github.com/prometheus/client_golang/prometheus"

// StageSnapshot is a point-in-time view of the input staging of a
// Nextflow task (supervise converts block.StageStats into it). Counters
// are totals since ferry started; all zero while nothing is staged.
type StageSnapshot struct {
	StagedBytes int64 // bytes fetched into the cache before the task read them
	HitBytes    int64 // of those, bytes the task then read from the cache
	WastedBytes int64 // staged bytes the task never read (known when it exits)
}

// NewStage registers the staging collectors on reg; snap is called once
// per scrape and must be safe for concurrent use and cheap:
//
//	ferry_stage_staged_bytes_total
//	ferry_stage_hit_bytes_total
//	ferry_stage_wasted_bytes_total
//
// It panics, like prometheus.MustRegister, when reg already holds them.
func NewStage(reg prometheus.Registerer, snap func() StageSnapshot) {
	type S = StageSnapshot
	reg.MustRegister(&snapshotCollector[S]{
		snap: snap,
		fields: []field[S]{
			counterField("ferry_stage_staged_bytes_total", "Bytes of a task's inputs fetched into the cache before the task read them (input staging).",
				func(s S) float64 { return float64(s.StagedBytes) }),
			counterField("ferry_stage_hit_bytes_total", "Staged bytes the task then read from the cache.",
				func(s S) float64 { return float64(s.HitBytes) }),
			counterField("ferry_stage_wasted_bytes_total", "Staged bytes the task never read (counted when the task exits).",
				func(s S) float64 { return float64(s.WastedBytes) }),
		},
	})
}
