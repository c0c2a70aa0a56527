package metrics

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDirReadahead(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex // guards snap
	var snap DirReadaheadSnapshot
	NewDirReadahead(reg, func() DirReadaheadSnapshot {
		mu.Lock()
		defer mu.Unlock()
		return snap
	})
	names := []string{"ferry_dir_readahead_files_total", "ferry_dir_readahead_predicted_bytes_total",
		"ferry_dir_readahead_hit_bytes_total", "ferry_dir_readahead_wasted_bytes_total"}
	for _, name := range names {
		if got, ok := value(t, reg, name, nil); !ok || got != 0 {
			t.Errorf("before any prediction: %s = %v (present %v), want 0", name, got, ok)
		}
	}
	mu.Lock()
	snap = DirReadaheadSnapshot{Files: 7, PredictedBytes: 3 << 20, HitBytes: 2 << 20, WastedBytes: 1 << 20}
	mu.Unlock()
	for i, want := range []float64{7, 3 << 20, 2 << 20, 1 << 20} {
		if got, ok := value(t, reg, names[i], nil); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", names[i], got, ok, want)
		}
	}
}
