package supervise

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// sample returns the value of the sample of family name with exactly the
// given label values (histograms: the sample count); 0 when absent.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
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
			if labelsEqual(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	return 0
}

func labelsEqual(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, lp := range m.GetLabel() {
		if want[lp.GetName()] != lp.GetValue() {
			return false
		}
	}
	return true
}

func req(op, result string) map[string]string {
	return map[string]string{"op": op, "backend": "mem", "result": result}
}

func opb(op string) map[string]string { return map[string]string{"op": op, "backend": "mem"} }

func TestInstrument(t *testing.T) {
	ctx := context.Background()
	inner := mem.New(mem.Options{MinPartSize: 4})
	fail := faulty.New(inner, faulty.Config{Fail: func(op, key string) error {
		switch key {
		case "throttled":
			return faulty.Throttled(op, key)
		case "denied":
			return &objstore.Error{Provider: "mem", Op: op, Bucket: "b", Key: key, Status: 403, RequestID: "req-42", Kind: objstore.ErrPermission}
		case "broken":
			return faulty.ServerError(op, key)
		}
		return nil
	}})
	reg := prometheus.NewRegistry()
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	st := Instrument(fail, InstrumentOptions{Metrics: metrics.NewBackend(reg), Logger: log})
	if _, ok := st.(objstore.Multipart); !ok {
		t.Fatal("instrumented multipart store is not Multipart")
	}
	if objstore.Unwrap(st) != objstore.Store(fail) {
		t.Error("Unwrap does not return the inner store")
	}

	data := []byte("0123456789")
	mustNot := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := st.Put(ctx, "a", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	mustNot(err)
	_, err = st.Put(ctx, "a", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfAbsent: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfAbsent put: %v", err)
	}
	_, err = st.Stat(ctx, "a")
	mustNot(err)
	_, err = st.Stat(ctx, "missing")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	for _, k := range []string{"throttled", "denied", "broken"} {
		if _, err := st.Stat(ctx, k); err == nil {
			t.Fatalf("stat %s succeeded", k)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = st.Stat(canceled, "a")

	// A whole body, a body closed half-way, and a missing object.
	r, err := st.NewReader(ctx, "a", 0, -1, objstore.ReadOptions{})
	mustNot(err)
	got, err := io.ReadAll(r)
	mustNot(err)
	mustNot(r.Close())
	if !bytes.Equal(got, data) {
		t.Fatalf("read %q", got)
	}
	r, err = st.NewReader(ctx, "a", 2, 4, objstore.ReadOptions{})
	mustNot(err)
	buf := make([]byte, 3)
	_, err = io.ReadFull(r, buf)
	mustNot(err)
	mustNot(r.Close())
	if _, err := st.NewReader(ctx, "missing", 0, -1, objstore.ReadOptions{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("NewReader missing: %v", err)
	}

	_, err = st.List(ctx, objstore.ListOptions{})
	mustNot(err)
	_, err = st.Copy(ctx, "a", "b", objstore.CopyOptions{})
	mustNot(err)
	mustNot(st.Delete(ctx, "b", objstore.DeleteOptions{}))

	u, err := st.(objstore.Multipart).CreateUpload(ctx, "mp", objstore.PutOptions{})
	mustNot(err)
	mustNot(u.UploadPart(ctx, 1, bytes.NewReader(data), 10))
	mustNot(u.UploadPart(ctx, 2, bytes.NewReader(data[:5]), 5))
	_, err = u.Complete(ctx)
	mustNot(err)
	u, err = st.(objstore.Multipart).CreateUpload(ctx, "mp2", objstore.PutOptions{})
	mustNot(err)
	mustNot(u.Abort(ctx))

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ferry_backend_requests_total", req("Put", "ok"), 1},
		{"ferry_backend_requests_total", req("Put", "precondition"), 1},
		{"ferry_backend_requests_total", req("Stat", "ok"), 1},
		{"ferry_backend_requests_total", req("Stat", "not_found"), 1},
		{"ferry_backend_requests_total", req("Stat", "throttled"), 1},
		{"ferry_backend_requests_total", req("Stat", "permission"), 1},
		{"ferry_backend_requests_total", req("Stat", "error"), 1},
		{"ferry_backend_requests_total", req("Stat", "canceled"), 1},
		{"ferry_backend_requests_total", req("NewReader", "ok"), 2},
		{"ferry_backend_requests_total", req("NewReader", "not_found"), 1},
		{"ferry_backend_requests_total", req("Read", "ok"), 2},
		{"ferry_backend_requests_total", req("List", "ok"), 1},
		{"ferry_backend_requests_total", req("Copy", "ok"), 1},
		{"ferry_backend_requests_total", req("Delete", "ok"), 1},
		{"ferry_backend_requests_total", req("CreateUpload", "ok"), 2},
		{"ferry_backend_requests_total", req("UploadPart", "ok"), 2},
		{"ferry_backend_requests_total", req("Complete", "ok"), 1},
		{"ferry_backend_requests_total", req("Abort", "ok"), 1},
		{"ferry_backend_errors_total", req("Stat", "throttled"), 1},
		{"ferry_backend_errors_total", req("Stat", "permission"), 1},
		{"ferry_backend_errors_total", req("Stat", "error"), 1},
		{"ferry_backend_errors_total", req("Stat", "not_found"), 0},
		{"ferry_backend_written_bytes_total", opb("Put"), 10}, // the failed IfAbsent put sent nothing
		{"ferry_backend_written_bytes_total", opb("UploadPart"), 15},
		{"ferry_backend_read_bytes_total", opb("Read"), 13},
		{"ferry_backend_request_duration_seconds", opb("Stat"), 6},
	}
	for _, tt := range tests {
		if got := sample(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}

	logs := logBuf.String()
	for _, want := range []string{"provider=mem", "op=Stat", "key=denied", "status=403", "request_id=req-42", "bucket=b", "key=broken", "status=500"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "key=missing") || strings.Contains(logs, "precondition") {
		t.Errorf("expected outcomes were logged as failures:\n%s", logs)
	}
}

// TestInstrumentReaderEndsOnce checks a body observed at EOF and closed
// later counts once, and a body failing mid-way counts as an error.
func TestInstrumentReaderEndsOnce(t *testing.T) {
	ctx := context.Background()
	inner := mem.New(mem.Options{})
	if _, err := inner.Put(ctx, "k", strings.NewReader("hello world"), 11, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fail := faulty.New(inner, faulty.Config{Cut: func(key string, off, length int64) (int64, error) {
		if off == 1 {
			return 3, nil // ErrTransport after 3 bytes
		}
		return -1, nil
	}})
	reg := prometheus.NewRegistry()
	st := Instrument(fail, InstrumentOptions{Metrics: metrics.NewBackend(reg), Provider: "mem"})
	for _, off := range []int64{0, 1} {
		r, err := st.NewReader(ctx, "k", off, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(r)
		_, _ = io.ReadAll(r) // reading past the end observes nothing more
		r.Close()
		r.Close()
	}
	if got := sample(t, reg, "ferry_backend_requests_total", req("Read", "ok")); got != 1 {
		t.Errorf("Read ok = %v, want 1", got)
	}
	if got := sample(t, reg, "ferry_backend_requests_total", req("Read", "error")); got != 1 {
		t.Errorf("Read error = %v, want 1", got)
	}
	if got := sample(t, reg, "ferry_backend_read_bytes_total", opb("Read")); got != 11+3 {
		t.Errorf("read bytes = %v, want 14", got)
	}
}

// TestRetryHook wraps a retry decorator whose inner store fails twice and
// checks the retries are counted and the next hook still runs.
func TestRetryHook(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int32
	inner := faulty.New(mem.New(mem.Options{}), faulty.Config{Fail: func(op, key string) error {
		if op == faulty.OpStat && n.Add(1) <= 2 {
			return faulty.ServerError(op, key)
		}
		return nil
	}})
	reg := prometheus.NewRegistry()
	b := metrics.NewBackend(reg)
	var next atomic.Int32
	st := objstore.WithRetry(inner, objstore.RetryPolicy{
		Base: time.Millisecond, Max: time.Millisecond,
		OnRetry: RetryHook(b, "mem", func(string, int, error) { next.Add(1) }),
	})
	st = Instrument(st, InstrumentOptions{Metrics: b, Provider: "mem"})
	if _, err := st.Stat(ctx, "nope"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat: %v", err)
	}
	if got := sample(t, reg, "ferry_backend_retries_total", opb("Stat")); got != 2 {
		t.Errorf("retries = %v, want 2", got)
	}
	if next.Load() != 2 {
		t.Errorf("next hook ran %d times, want 2", next.Load())
	}
	if got := b.Totals(); got.Retries != 2 || got.Requests != 1 || got.Failures != 0 {
		t.Errorf("totals %+v", got)
	}
}
