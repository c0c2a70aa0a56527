package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Result is the bounded outcome label of one backend call.
type Result string

// Results of backend calls. The caller (supervise's store decorator) maps
// objstore's sentinel errors onto them; metrics does not import objstore.
const (
	ResultOK           Result = "ok"
	ResultNotFound     Result = "not_found"    // ErrNotFound: often expected (a lookup of a new name)
	ResultPrecondition Result = "precondition" // ErrPrecondition: a version changed
	ResultPermission   Result = "permission"   // ErrPermission
	ResultThrottled    Result = "throttled"    // ErrThrottled, after every retry
	ResultUnsupported  Result = "unsupported"  // ErrUnsupported: the caller falls back
	ResultCanceled     Result = "canceled"     // the caller's context ended
	ResultError        Result = "error"        // anything else: transport, 5xx, timeouts
)

// Failure reports whether r is a real failure: permission, throttled or
// error. Not found, precondition, unsupported and canceled are outcomes a
// caller expects and handles.
func (r Result) Failure() bool {
	return r == ResultPermission || r == ResultThrottled || r == ResultError
}

// Call is one finished backend call.
type Call struct {
	Op       string        // "Stat", "NewReader", "Read" (a body), "List", "Put", "UploadPart", …
	Backend  string        // the provider: "s3", "gs", "az", "mem"
	Result   Result        // its outcome
	Duration time.Duration // its latency (for "Read", the body's transfer time)
	// ReadBytes and WrittenBytes are payload bytes received and sent.
	ReadBytes, WrittenBytes int64
}

// BackendTotals are process-wide sums of the backend collectors, for the
// exit summary.
type BackendTotals struct {
	Requests     int64 // calls observed
	Failures     int64 // calls whose Result.Failure() is true
	Retries      int64 // retried attempts
	ReadBytes    int64 // payload bytes received
	WrittenBytes int64 // payload bytes sent
}

// Backend counts object-store requests by operation, backend and result.
// Its methods are safe for concurrent use and on a nil receiver (they do
// nothing, so code paths without metrics need no checks).
type Backend struct {
	requests *prometheus.CounterVec   // op, backend, result
	failures *prometheus.CounterVec   // op, backend, result (failures only)
	retries  *prometheus.CounterVec   // op, backend
	read     *prometheus.CounterVec   // op, backend
	written  *prometheus.CounterVec   // op, backend
	latency  *prometheus.HistogramVec // op, backend

	// Atomic mirrors of the counters above, read by Totals without a
	// gather.
	nRequests, nFailures, nRetries, nRead, nWritten atomic.Int64
}

// NewBackend registers the backend collectors on reg:
//
//	ferry_backend_requests_total{op,backend,result}
//	ferry_backend_errors_total{op,backend,result}   (permission, throttled, error)
//	ferry_backend_retries_total{op,backend}
//	ferry_backend_read_bytes_total{op,backend}
//	ferry_backend_written_bytes_total{op,backend}
//	ferry_backend_request_duration_seconds{op,backend}
//
// It panics, like prometheus.MustRegister, when reg already holds them.
func NewBackend(reg prometheus.Registerer) *Backend {
	opBackend := []string{"op", "backend"}
	withResult := []string{"op", "backend", "result"}
	b := &Backend{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_backend_requests_total",
			Help: "Object-store calls (after retries) by operation, backend and result.",
		}, withResult),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_backend_errors_total",
			Help: "Object-store calls that failed for good (result permission, throttled or error).",
		}, withResult),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_backend_retries_total",
			Help: "Object-store attempts that failed and were retried.",
		}, opBackend),
		read: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_backend_read_bytes_total",
			Help: "Payload bytes received from the object store.",
		}, opBackend),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_backend_written_bytes_total",
			Help: "Payload bytes sent to the object store.",
		}, opBackend),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_backend_request_duration_seconds",
			Help:    "Object-store call latency (for op Read, a body's transfer time).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12), // 1 ms … ~60 s
		}, opBackend),
	}
	reg.MustRegister(b.requests, b.failures, b.retries, b.read, b.written, b.latency)
	return b
}

// Observe records one finished call.
func (b *Backend) Observe(c Call) {
	if b == nil {
		return
	}
	b.requests.WithLabelValues(c.Op, c.Backend, string(c.Result)).Inc()
	b.nRequests.Add(1)
	if c.Result.Failure() {
		b.failures.WithLabelValues(c.Op, c.Backend, string(c.Result)).Inc()
		b.nFailures.Add(1)
	}
	b.latency.WithLabelValues(c.Op, c.Backend).Observe(c.Duration.Seconds())
	b.AddRead(c.Op, c.Backend, c.ReadBytes)
	b.AddWritten(c.Op, c.Backend, c.WrittenBytes)
}

// AddRead counts n payload bytes received (a body streaming in before
// its call is observed). n <= 0 is ignored.
func (b *Backend) AddRead(op, backend string, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.read.WithLabelValues(op, backend).Add(float64(n))
	b.nRead.Add(n)
}

// AddWritten counts n payload bytes sent. n <= 0 is ignored.
func (b *Backend) AddWritten(op, backend string, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.written.WithLabelValues(op, backend).Add(float64(n))
	b.nWritten.Add(n)
}

// Retry counts one failed attempt that is about to be retried.
func (b *Backend) Retry(op, backend string) {
	if b == nil {
		return
	}
	b.retries.WithLabelValues(op, backend).Inc()
	b.nRetries.Add(1)
}

// Totals returns the sums since NewBackend (zero on a nil receiver).
func (b *Backend) Totals() BackendTotals {
	if b == nil {
		return BackendTotals{}
	}
	return BackendTotals{
		Requests:     b.nRequests.Load(),
		Failures:     b.nFailures.Load(),
		Retries:      b.nRetries.Load(),
		ReadBytes:    b.nRead.Load(),
		WrittenBytes: b.nWritten.Load(),
	}
}
