package metrics

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestStage(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex // guards snap
	var snap StageSnapshot
	NewStage(reg, func() StageSnapshot {
		mu.Lock()
		defer mu.Unlock()
		return snap
	})
	for _, name := range []string{"ferry_stage_staged_bytes_total", "ferry_stage_hit_bytes_total", "ferry_stage_wasted_bytes_total"} {
		if got, ok := value(t, reg, name, nil); !ok || got != 0 {
			t.Errorf("before staging: %s = %v (present %v), want 0", name, got, ok)
		}
	}
	mu.Lock()
	snap = StageSnapshot{StagedBytes: 3 << 20, HitBytes: 2 << 20, WastedBytes: 1 << 20}
	mu.Unlock()
	for name, want := range map[string]float64{
		"ferry_stage_staged_bytes_total": 3 << 20, "ferry_stage_hit_bytes_total": 2 << 20, "ferry_stage_wasted_bytes_total": 1 << 20,
	} {
		if got, ok := value(t, reg, name, nil); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}
