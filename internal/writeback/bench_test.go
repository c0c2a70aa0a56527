package writeback

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// linkLatency is the simulated round trip of every request.
const linkLatency = 20 * time.Millisecond

// slowLink makes every request take linkLatency and counts the requests
// in flight at once.
type slowLink struct {
	inflight, peak atomic.Int64
}

func (s *slowLink) config() faulty.Config {
	return faulty.Config{Stall: func(op, key string) time.Duration {
		if op == faulty.OpRead {
			return 0
		}
		n := s.inflight.Add(1)
		for {
			p := s.peak.Load()
			if n <= p || s.peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.AfterFunc(linkLatency, func() { s.inflight.Add(-1) })
		return linkLatency
	}}
}

// smallFiles writes n files of size bytes, closes each, and returns the
// time to close them all and the time until all are durable.
func smallFiles(t testing.TB, m *Manager, n, size int) (closed, durable time.Duration) {
	data := pattern(size, 9)
	start := time.Now()
	for i := range n {
		f, err := m.Create(tgt(fmt.Sprintf("small/%04d", i)), 0o644)
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
	}
	closed = time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	return closed, time.Since(start)
}

// TestSmallFilesParallel shows that small files upload in parallel, not
// one after another: it checks the peak of requests in flight, never a
// duration (the timings are only logged).
func TestSmallFilesParallel(t *testing.T) {
	e := newEnv(t)
	link := &slowLink{}
	e.setFaults(link.config())
	cfg := e.config()
	cfg.SpareFiles = DefaultSpareFiles
	m := e.open(cfg)
	// As a first Create does.
	m.refill()
	waitFor(t, "the spare data files", func() bool { // ferry starts before the task
		m.spareMu.Lock()
		defer m.spareMu.Unlock()
		return m.spareCountLocked() >= m.cfg.SpareFiles
	})
	const n = 1000
	closed, durable := smallFiles(t, m, n, 4<<10)
	t.Logf("%d × 4 KiB through a %v link: closed in %v, durable in %v, peak %d requests in flight",
		n, linkLatency, closed.Round(time.Millisecond), durable.Round(time.Millisecond), link.peak.Load())
	if p := link.peak.Load(); p < int64(m.cfg.SmallConcurrency)/2 {
		t.Errorf("peak of %d requests in flight, want about %d", p, m.cfg.SmallConcurrency)
	}
	if got := e.mem.Len(); got != n {
		t.Errorf("%d objects, want %d", got, n)
	}
	for i := 0; i < n; i += 97 {
		e.wantObject(fmt.Sprintf("small/%04d", i), pattern(4<<10, 9))
	}
}

// BenchmarkSmallFiles measures staging and uploading 1,000 × 4 KiB files
// through a 20 ms link (go test -run x -bench SmallFiles).
func BenchmarkSmallFiles(b *testing.B) {
	for range b.N {
		b.StopTimer()
		e := newEnv(&testing.T{})
		e.dir = b.TempDir()
		link := &slowLink{}
		e.setFaults(link.config())
		m, err := New(context.Background(), e.config(), func(context.Context, string, string) (objstore.Store, error) {
			return e.rec, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		closed, durable := smallFiles(b, m, 1000, 4<<10)
		b.ReportMetric(float64(closed.Milliseconds()), "ms-closed")
		b.ReportMetric(float64(durable.Milliseconds()), "ms-durable")
		m.Close()
	}
}
