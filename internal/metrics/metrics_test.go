package metrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value returns the value of the sample of family name whose labels
// include want, and whether it exists. Histograms give their count.
func value(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func TestBackendObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBackend(reg)
	calls := []Call{
		{Op: "Stat", Backend: "s3", Result: ResultOK, Duration: time.Millisecond},
		{Op: "Stat", Backend: "s3", Result: ResultNotFound, Duration: time.Millisecond},
		{Op: "Put", Backend: "s3", Result: ResultOK, Duration: 10 * time.Millisecond, WrittenBytes: 100},
		{Op: "Put", Backend: "s3", Result: ResultThrottled, Duration: time.Second},
		{Op: "Read", Backend: "gs", Result: ResultOK, Duration: time.Second, ReadBytes: 4096},
		{Op: "Read", Backend: "gs", Result: ResultError, Duration: time.Second, ReadBytes: 10},
	}
	for _, c := range calls {
		b.Observe(c)
	}
	b.Retry("Put", "s3")
	b.Retry("Put", "s3")
	b.AddRead("Read", "gs", 6)
	b.AddRead("Read", "gs", -1) // ignored

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ferry_backend_requests_total", map[string]string{"op": "Stat", "backend": "s3", "result": "ok"}, 1},
		{"ferry_backend_requests_total", map[string]string{"op": "Stat", "backend": "s3", "result": "not_found"}, 1},
		{"ferry_backend_requests_total", map[string]string{"op": "Put", "backend": "s3", "result": "throttled"}, 1},
		{"ferry_backend_errors_total", map[string]string{"op": "Put", "backend": "s3", "result": "throttled"}, 1},
		{"ferry_backend_errors_total", map[string]string{"op": "Read", "backend": "gs", "result": "error"}, 1},
		{"ferry_backend_retries_total", map[string]string{"op": "Put", "backend": "s3"}, 2},
		{"ferry_backend_written_bytes_total", map[string]string{"op": "Put", "backend": "s3"}, 100},
		{"ferry_backend_read_bytes_total", map[string]string{"op": "Read", "backend": "gs"}, 4112},
		{"ferry_backend_request_duration_seconds", map[string]string{"op": "Stat", "backend": "s3"}, 2},
	}
	for _, tt := range tests {
		got, ok := value(t, reg, tt.name, tt.labels)
		if !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	// not_found is not a failure.
	if _, ok := value(t, reg, "ferry_backend_errors_total", map[string]string{"result": "not_found"}); ok {
		t.Error("not_found counted as an error")
	}
	want := BackendTotals{Requests: 6, Failures: 2, Retries: 2, ReadBytes: 4112, WrittenBytes: 100}
	if got := b.Totals(); got != want {
		t.Errorf("Totals() = %+v, want %+v", got, want)
	}
}

func TestNilReceivers(t *testing.T) {
	var b *Backend
	b.Observe(Call{Op: "Stat"})
	b.Retry("Stat", "s3")
	b.AddWritten("Put", "s3", 1)
	if b.Totals() != (BackendTotals{}) {
		t.Error("nil Backend has totals")
	}
	var w *Writeback
	done := w.StartDrain()
	if done() < 0 || w.DrainDuration() != 0 {
		t.Error("nil Writeback drain")
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestWriteback(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	var mu sync.Mutex // guards snap
	snap := WritebackSnapshot{PendingFiles: 3, PendingBytes: 300, OldestPending: 2 * time.Second}
	w := NewWriteback(reg, func() WritebackSnapshot {
		mu.Lock()
		defer mu.Unlock()
		return snap
	}, WritebackOptions{Now: clk.Now})

	check := func(step, name string, want float64) {
		t.Helper()
		got, ok := value(t, reg, name, nil)
		if !ok || got != want {
			t.Errorf("%s: %s = %v (present %v), want %v", step, name, got, ok, want)
		}
	}
	check("start", "ferry_writeback_pending_files", 3)
	check("start", "ferry_writeback_pending_bytes", 300)
	check("start", "ferry_writeback_oldest_pending_seconds", 2)
	check("start", "ferry_writeback_draining", 0)
	check("start", "ferry_writeback_drain_duration_seconds", 0)

	mu.Lock()
	snap = WritebackSnapshot{UploadedBytes: 8 << 20, UploadedObjects: 3, Retries: 1, Failures: 1}
	mu.Unlock()
	clk.Add(2 * time.Second)
	check("uploaded", "ferry_writeback_upload_throughput_bytes_per_second", 4<<20)
	check("uploaded", "ferry_writeback_uploaded_bytes_total", 8<<20)
	check("uploaded", "ferry_writeback_uploaded_objects_total", 3)
	check("uploaded", "ferry_writeback_upload_retries_total", 1)
	check("uploaded", "ferry_writeback_upload_failures_total", 1)
	check("uploaded", "ferry_writeback_pending_files", 0)
	// A scrape within the window keeps the last rate.
	clk.Add(100 * time.Millisecond)
	check("same window", "ferry_writeback_upload_throughput_bytes_per_second", 4<<20)
	// Nothing uploaded for 2 s: the rate falls to 0.
	clk.Add(2 * time.Second)
	check("idle", "ferry_writeback_upload_throughput_bytes_per_second", 0)

	done := w.StartDrain()
	clk.Add(3 * time.Second)
	check("draining", "ferry_writeback_draining", 1)
	check("draining", "ferry_writeback_drain_duration_seconds", 3)
	clk.Add(time.Second)
	if d := done(); d != 4*time.Second {
		t.Errorf("drain done() = %v, want 4s", d)
	}
	clk.Add(time.Minute)
	check("drained", "ferry_writeback_draining", 0)
	check("drained", "ferry_writeback_drain_duration_seconds", 4)
	if d := w.DrainDuration(); d != 4*time.Second {
		t.Errorf("DrainDuration() = %v, want 4s", d)
	}
}

func TestCache(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex // guards snap
	var snap CacheSnapshot
	NewCache(reg, func() CacheSnapshot {
		mu.Lock()
		defer mu.Unlock()
		return snap
	})
	mu.Lock()
	snap = CacheSnapshot{
		Hits: 1, Misses: 2, BytesFromCache: 3, BytesFromNetwork: 4, BytesFetched: 5,
		PrefetchedBytes: 6, Fetches: 7, FetchesInFlight: 8, QueuedFetches: 9, Evictions: 10,
		EvictedBytes: 11, Corruptions: 12, Objects: 13, BytesCached: 14, MaxBytes: 15,
		FreeBytes: 16, ReadaheadWindow: 17, MemoryInUse: 18, OpenReaders: 19,
		ClaimWaits: 20, FreshBlocks: 21,
	}
	mu.Unlock()
	tests := []struct {
		name string
		want float64
	}{
		{"ferry_cache_hits_total", 1},
		{"ferry_cache_misses_total", 2},
		{"ferry_cache_hit_bytes_total", 3},
		{"ferry_cache_miss_bytes_total", 4},
		{"ferry_cache_fetched_bytes_total", 5},
		{"ferry_readahead_prefetched_bytes_total", 6},
		{"ferry_cache_fetches_total", 7},
		{"ferry_cache_inflight_fetches", 8},
		{"ferry_cache_queued_fetches", 9},
		{"ferry_cache_evictions_total", 10},
		{"ferry_cache_evicted_bytes_total", 11},
		{"ferry_cache_checksum_failures_total", 12},
		{"ferry_cache_stored_objects", 13},
		{"ferry_cache_cached_bytes", 14},
		{"ferry_cache_limit_bytes", 15},
		{"ferry_cache_disk_free_bytes", 16},
		{"ferry_readahead_window_bytes", 17},
		{"ferry_cache_buffer_bytes", 18},
		{"ferry_cache_claim_waits_total", 20},
		{"ferry_cache_fresh_blocks_total", 21},
		{"ferry_cache_open_readers", 19},
	}
	for _, tt := range tests {
		if got, ok := value(t, reg, tt.name, nil); !ok || got != tt.want {
			t.Errorf("%s = %v (present %v), want %v", tt.name, got, ok, tt.want)
		}
	}
}

// TestNames checks every family registered by this package against the
// naming rule ferry_<subsystem>_<name>_<unit> and the label rule.
func TestNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBackend(reg)
	b.Observe(Call{Op: "Stat", Backend: "mem", Result: ResultOK})
	b.Retry("Stat", "mem")
	b.AddRead("Read", "mem", 1)
	b.AddWritten("Put", "mem", 1)
	NewWriteback(reg, func() WritebackSnapshot { return WritebackSnapshot{} }, WritebackOptions{})
	NewCache(reg, func() CacheSnapshot { return CacheSnapshot{} })
	NewStage(reg, func() StageSnapshot { return StageSnapshot{} })
	NewFUSE(reg).Observe("lookup", time.Millisecond, 0)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"op": true, "backend": true, "result": true}
	units := []string{"_total", "_bytes", "_seconds", "_files", "_fetches", "_blocks", "_objects", "_readers", "_bytes_per_second", "_draining"}
	if len(fams) < 20 {
		t.Errorf("only %d families", len(fams))
	}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "ferry_") || strings.Count(name, "_") < 3 && !strings.HasSuffix(name, "_draining") {
			t.Errorf("%s does not follow ferry_<subsystem>_<name>_<unit>", name)
		}
		ok := false
		for _, u := range units {
			ok = ok || strings.HasSuffix(name, u)
		}
		if !ok {
			t.Errorf("%s has no unit suffix", name)
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !allowed[lp.GetName()] {
					t.Errorf("%s has unbounded label %q", name, lp.GetName())
				}
			}
		}
	}
}
