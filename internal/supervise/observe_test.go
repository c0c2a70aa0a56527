package supervise

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// TestObserver runs a small workload through an instrumented mem store,
// a block cache and a write-back manager, and checks the collectors and
// the summary follow it.
func TestObserver(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := metrics.NewRegistry()
	obs := newObserver(reg)
	defer obs.close()
	st := obs.wrapStore(objstore.WithRetry(mem.New(mem.Options{Bucket: "b"}), objstore.RetryPolicy{
		OnRetry: obs.retryHook("mem", nil),
	}), "mem", nil)
	resolve := func(context.Context, string, string) (objstore.Store, error) { return st, nil }

	blocks, err := block.New(block.Config{Dir: filepath.Join(dir, "blocks"), MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer blocks.Close()
	wb, err := writeback.New(ctx, writeback.Config{Dir: filepath.Join(dir, "wb")}, resolve)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	obs.attach(blocks, wb)
	if err := obs.serve(""); err != nil || obs.srv != nil {
		t.Fatalf("serve with no address: %v", err)
	}

	// Write one file through the write-back and drain it.
	data := bytes.Repeat([]byte("ferry"), 300_000) // 1.5 MB
	f, err := wb.Create(writeback.Target{Scheme: "s3", Bucket: "b", Key: "out"}, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Acquire()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	obs.progress = (&recorder{}).report
	if err := obs.drain(ctx, wb); err != nil {
		t.Fatal(err)
	}

	// Read it twice through the cache: the second read is all hits.
	info, err := st.Stat(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := blocks.Open(block.Ref{Store: st, StoreID: "s3/b", Key: "out", Version: info.Version, Size: info.Size})
		got := make([]byte, len(data))
		if _, err := r.ReadAt(ctx, got, 0); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		r.Close()
		if !bytes.Equal(got, data) {
			t.Fatal("read back different bytes")
		}
	}

	n := int64(len(data))
	positive := []string{
		"ferry_backend_requests_total", "ferry_backend_written_bytes_total", "ferry_backend_read_bytes_total",
		"ferry_cache_hits_total", "ferry_cache_hit_bytes_total", "ferry_cache_miss_bytes_total",
		"ferry_cache_fetched_bytes_total", "ferry_cache_cached_bytes", "ferry_cache_limit_bytes",
		"ferry_writeback_uploaded_bytes_total", "ferry_writeback_uploaded_objects_total",
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]float64{}
	ferry := 0
	for _, fam := range fams {
		if len(fam.GetName()) > 6 && fam.GetName()[:6] == "ferry_" {
			ferry++
		}
		for _, m := range fam.GetMetric() {
			sum[fam.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if ferry < 10 {
		t.Errorf("only %d ferry_ families", ferry)
	}
	for _, name := range positive {
		if sum[name] <= 0 {
			t.Errorf("%s did not move", name)
		}
	}
	if sum["ferry_writeback_pending_files"] != 0 {
		t.Errorf("pending files after the drain: %v", sum["ferry_writeback_pending_files"])
	}

	// A task, then the summary line.
	obs.taskStarting()
	task := exec.Command("sh", "-c", "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done")
	if err := task.Run(); err != nil {
		t.Fatal(err)
	}
	obs.taskEnded(task.ProcessState)
	var stderr bytes.Buffer
	obs.stderr = &stderr
	line := obs.summarize(blocks, wb, 3, nil)
	if !bytes.Equal(line, stderr.Bytes()) {
		t.Errorf("summarize returned %q but wrote %q", line, stderr.Bytes())
	}
	var s Summary
	if err := json.Unmarshal(line, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != SummaryType || s.ExitCode != 3 || s.TaskSeconds <= 0 || s.ComputeSeconds <= 0 || s.WallSeconds < s.TaskSeconds || s.Efficiency <= 0 {
		t.Errorf("summary timing %+v", s)
	}
	if s.BytesReadCache+s.BytesReadNetwork != 2*n || s.BytesReadCache < n {
		t.Errorf("summary reads cache %d + network %d, want %d with at least %d from cache", s.BytesReadCache, s.BytesReadNetwork, 2*n, n)
	}
	if s.BytesUploaded != n || s.ObjectsUploaded != 1 || s.NotDurableFiles != 0 {
		t.Errorf("summary uploads %+v, want %d bytes in 1 object", s, n)
	}
	// The drain's time is rounded to milliseconds: a drain that found the
	// upload already landed may take less than half of one.
	if s.BytesDownloaded < n || s.Errors != 0 || s.DrainSeconds < 0 {
		t.Errorf("summary %+v", s)
	}
	if got := obs.summarize(blocks, wb, 0, errors.New("not durable")); !bytes.Contains(got, []byte(`"exit_code":174`)) {
		t.Errorf("a drain error does not make exit code 174: %s", got)
	}
}
