package metrics

import (
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FUSE counts kernel requests by operation and result.
type FUSE struct {
	ops     *prometheus.CounterVec
	latency *prometheus.HistogramVec
	opens   *prometheus.CounterVec
}

// NewFUSE registers the FUSE collectors on reg.
func NewFUSE(reg prometheus.Registerer) *FUSE {
	f := &FUSE{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fuse_ops_total", Help: "FUSE operations by op and result (ok or errno name).",
		}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_fuse_op_duration_seconds", Help: "FUSE operation latency.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}, []string{"op"}),
		opens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_fuse_opens_total",
			Help: "File opens by how the kernel serves their reads: passthrough (from a cache file, without ferry), direct (through ferry, beside passthrough opens of the file) or cached (through ferry and the page cache).",
		}, []string{"mode"}),
	}
	reg.MustRegister(f.ops, f.latency, f.opens)
	return f
}

// Opened counts an open served in mode (passthrough, direct or cached).
// Safe on a nil receiver.
func (f *FUSE) Opened(mode string) {
	if f != nil {
		f.opens.WithLabelValues(mode).Inc()
	}
}

// Observe records one operation. Safe on a nil receiver.
func (f *FUSE) Observe(op string, d time.Duration, errno syscall.Errno) {
	if f == nil {
		return
	}
	res := "ok"
	if errno != 0 {
		res = errnoName(errno)
	}
	f.ops.WithLabelValues(op, res).Inc()
	f.latency.WithLabelValues(op).Observe(d.Seconds())
}

// errnoName keeps the result label bounded: common errnos by name, the
// rest as "other".
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EIO:
		return "EIO"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EINTR:
		return "EINTR"
	case syscall.ENOTSUP:
		return "ENOTSUP"
	}
	return "other"
}
