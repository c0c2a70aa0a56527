package supervise

import (
	"sync"
	"testing"
	"time"
)

// queue is a fake write-back queue drained by the test.
type queue struct {
	mu    sync.Mutex // guards files and bytes
	files int
	bytes int64
}

func (q *queue) pending() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.files, q.bytes
}

func (q *queue) set(files int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.files, q.bytes = files, bytes
}

// recorder collects progress reports.
type recorder struct {
	mu  sync.Mutex // guards got
	got []Progress
}

func (r *recorder) report(p Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
}

func (r *recorder) reports() []Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Progress(nil), r.got...)
}

func (r *recorder) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(r.reports()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d reports", len(r.reports()))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWatchDrain(t *testing.T) {
	q := &queue{files: 4, bytes: 400}
	rec := &recorder{}
	w := WatchDrain(q.pending, rec.report, DrainWatchOptions{Delay: 5 * time.Millisecond, Interval: time.Millisecond})
	rec.waitFor(t, 1)
	q.set(3, 300)
	rec.waitFor(t, len(rec.reports())+2)
	q.set(3, 350) // a late file joined the queue
	rec.waitFor(t, len(rec.reports())+2)
	q.set(0, 0)
	rec.waitFor(t, len(rec.reports())+2)
	w.Stop()
	w.Stop() // idempotent

	got := rec.reports()
	var prev Progress
	for i, p := range got {
		if p.Op != "drain" {
			t.Errorf("report %d: op %q", i, p.Op)
		}
		if p.Done < prev.Done || p.Total < prev.Total || p.Files < prev.Files {
			t.Errorf("report %d went backwards: %+v after %+v", i, p, prev)
		}
		if p.Done > p.Total || p.Files > p.FilesTotal {
			t.Errorf("report %d: done beyond total: %+v", i, p)
		}
		if p.Final != (i == len(got)-1) {
			t.Errorf("report %d: Final = %v", i, p.Final)
		}
		prev = p
	}
	last := got[len(got)-1]
	if last.Done != last.Total || last.Total < 400 || last.Files != last.FilesTotal {
		t.Errorf("last report %+v: want everything done", last)
	}
}

func TestWatchDrainQuick(t *testing.T) {
	q := &queue{files: 1, bytes: 10}
	rec := &recorder{}
	w := WatchDrain(q.pending, rec.report, DrainWatchOptions{Delay: time.Hour})
	q.set(0, 0)
	w.Stop()
	if n := len(rec.reports()); n != 0 {
		t.Errorf("a quick drain made %d reports", n)
	}
	WatchDrain(q.pending, nil, DrainWatchOptions{}).Stop() // no reporter: no-op
}
