package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WritebackSnapshot is a point-in-time view of the upload queue. It
// mirrors writeback.Stats field for field (supervise converts one into the
// other; metrics does not import writeback).
type WritebackSnapshot struct {
	PendingFiles    int           // dirty files not yet durable
	PendingBytes    int64         // their total size
	OldestPending   time.Duration // age of the oldest not-yet-durable modification
	UploadedBytes   int64         // bytes sent in Put and UploadPart requests
	UploadedObjects int64         // objects made durable
	Retries         int64         // failed upload attempts that were retried
	Failures        int64         // upload attempts that failed with a final error
}

// throughputWindow is the shortest interval over which the upload
// throughput gauge is recomputed; scrapes closer together see the previous
// value.
const throughputWindow = time.Second

// Writeback exposes the write-back queue and the exit drain:
//
//	ferry_writeback_pending_files
//	ferry_writeback_pending_bytes
//	ferry_writeback_oldest_pending_seconds
//	ferry_writeback_uploaded_bytes_total
//	ferry_writeback_uploaded_objects_total
//	ferry_writeback_upload_retries_total
//	ferry_writeback_upload_failures_total
//	ferry_writeback_upload_throughput_bytes_per_second
//	ferry_writeback_draining
//	ferry_writeback_drain_duration_seconds
//
// Its methods are safe for concurrent use and on a nil receiver.
type Writeback struct {
	now func() time.Time

	mu sync.Mutex // guards the fields below
	// Upload throughput: the sample it was last computed from, and its value.
	lastAt    time.Time
	lastBytes int64
	rate      float64
	// The drain: zero drainStart = not started; zero drainEnd = running.
	drainStart, drainEnd time.Time
}

// WritebackOptions configure NewWriteback.
type WritebackOptions struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// NewWriteback registers the write-back collectors on reg. snap is called
// once per scrape; it must be safe for concurrent use and cheap (it runs
// while /metrics is answering). It panics, like prometheus.MustRegister,
// when reg already holds the collectors.
func NewWriteback(reg prometheus.Registerer, snap func() WritebackSnapshot, opts WritebackOptions) *Writeback {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Writeback{now: opts.Now, lastAt: opts.Now()}
	type S = WritebackSnapshot
	throughput := prometheus.NewDesc("ferry_writeback_upload_throughput_bytes_per_second",
		"Upload throughput between the last two scrapes at least 1 s apart.", nil, nil)
	c := &snapshotCollector[S]{
		snap: snap,
		fields: []field[S]{
			gaugeField("ferry_writeback_pending_files", "Dirty files not yet durable in the bucket.",
				func(s S) float64 { return float64(s.PendingFiles) }),
			gaugeField("ferry_writeback_pending_bytes", "Bytes of dirty files not yet durable.",
				func(s S) float64 { return float64(s.PendingBytes) }),
			gaugeField("ferry_writeback_oldest_pending_seconds", "Age of the oldest modification not yet durable.",
				func(s S) float64 { return s.OldestPending.Seconds() }),
			counterField("ferry_writeback_uploaded_bytes_total", "Bytes sent in Put and UploadPart requests.",
				func(s S) float64 { return float64(s.UploadedBytes) }),
			counterField("ferry_writeback_uploaded_objects_total", "Objects made durable.",
				func(s S) float64 { return float64(s.UploadedObjects) }),
			counterField("ferry_writeback_upload_retries_total", "Failed upload attempts that were retried.",
				func(s S) float64 { return float64(s.Retries) }),
			counterField("ferry_writeback_upload_failures_total", "Upload attempts that failed with a final error.",
				func(s S) float64 { return float64(s.Failures) }),
		},
		extraDescs: []*prometheus.Desc{throughput},
		extra: func(s S, ch chan<- prometheus.Metric) {
			ch <- prometheus.MustNewConstMetric(throughput, prometheus.GaugeValue, w.throughput(s.UploadedBytes))
		},
	}
	draining := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_writeback_draining", Help: "1 while the exit drain runs, else 0.",
	}, func() float64 {
		if _, running := w.drain(); running {
			return 1
		}
		return 0
	})
	drainDur := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_writeback_drain_duration_seconds",
		Help: "Time spent in the exit drain so far (0 before it starts).",
	}, func() float64 {
		d, _ := w.drain()
		return d.Seconds()
	})
	reg.MustRegister(c, draining, drainDur)
	return w
}

// throughput returns the upload rate since the previous sample, taking a
// new sample when the last one is at least throughputWindow old.
func (w *Writeback) throughput(uploaded int64) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	dt := now.Sub(w.lastAt)
	if dt < throughputWindow {
		return w.rate
	}
	w.rate = max(0, float64(uploaded-w.lastBytes)/dt.Seconds())
	w.lastAt, w.lastBytes = now, uploaded
	return w.rate
}

// StartDrain marks the start of the exit drain; the returned function
// marks its end and returns its duration. Calling StartDrain again starts
// a new measurement.
func (w *Writeback) StartDrain() (done func() time.Duration) {
	if w == nil {
		t0 := time.Now()
		return func() time.Duration { return time.Since(t0) }
	}
	w.mu.Lock()
	w.drainStart, w.drainEnd = w.now(), time.Time{}
	w.mu.Unlock()
	return func() time.Duration {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.drainEnd.IsZero() {
			w.drainEnd = w.now()
		}
		return w.drainEnd.Sub(w.drainStart)
	}
}

// DrainDuration returns the time spent draining so far (0 before
// StartDrain).
func (w *Writeback) DrainDuration() time.Duration {
	if w == nil {
		return 0
	}
	d, _ := w.drain()
	return d
}

// drain returns the drain's duration so far and whether it is running.
func (w *Writeback) drain() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.drainStart.IsZero():
		return 0, false
	case w.drainEnd.IsZero():
		return w.now().Sub(w.drainStart), true
	}
	return w.drainEnd.Sub(w.drainStart), false
}
