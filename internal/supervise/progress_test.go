package supervise

import (
	"sync"
	"testing"
	"time"
)

// queue is a fake write-back queue drained by the test.
type queue struct {
	mu sync.Mutex // guards s
	s  DrainState
}

func (q *queue) state() DrainState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s
}

func (q *queue) set(files int, bytes, uploaded int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.s = DrainState{PendingFiles: files, PendingBytes: bytes, UploadedBytes: uploaded}
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
	q := &queue{}
	q.set(4, 400, 1000)
	rec := &recorder{}
	w := WatchDrain(q.state, rec.report, DrainWatchOptions{Delay: 5 * time.Millisecond, Interval: time.Millisecond})
	rec.waitFor(t, 1)
	q.set(3, 300, 1100)
	rec.waitFor(t, len(rec.reports())+2)
	q.set(4, 350, 1150) // a late file joined the queue
	rec.waitFor(t, len(rec.reports())+2)
	q.set(0, 0, 1450)
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
	q := &queue{}
	q.set(1, 10, 0)
	rec := &recorder{}
	w := WatchDrain(q.state, rec.report, DrainWatchOptions{Delay: time.Hour})
	q.set(0, 0, 10)
	w.Stop()
	if n := len(rec.reports()); n != 0 {
		t.Errorf("a quick drain made %d reports", n)
	}
	WatchDrain(q.state, nil, DrainWatchOptions{}).Stop() // no reporter: no-op
}

// TestDrainTally steps the drain arithmetic through a queue that streams
// one big file, gains a late file and ends.
func TestDrainTally(t *testing.T) {
	t0 := time.Unix(0, 0)
	first := DrainState{PendingFiles: 2, PendingBytes: 100, UploadedBytes: 500}
	tally := &drainTally{t0: t0, first: first, prev: first, total: 100, filesTotal: 2}
	steps := []struct {
		name  string
		s     DrainState
		final bool
		want  Progress
	}{
		{"parts streaming", DrainState{PendingFiles: 2, PendingBytes: 100, UploadedBytes: 540}, false,
			Progress{Done: 40, Total: 100, Files: 0, FilesTotal: 2}},
		{"one file durable", DrainState{PendingFiles: 1, PendingBytes: 30, UploadedBytes: 550}, false,
			Progress{Done: 70, Total: 100, Files: 1, FilesTotal: 2}},
		{"late file joins", DrainState{PendingFiles: 2, PendingBytes: 80, UploadedBytes: 555}, false,
			Progress{Done: 70, Total: 150, Files: 1, FilesTotal: 3}},
		{"uploads overtake", DrainState{PendingFiles: 2, PendingBytes: 80, UploadedBytes: 640}, false,
			Progress{Done: 140, Total: 150, Files: 1, FilesTotal: 3}},
		{"empty", DrainState{UploadedBytes: 650}, true,
			Progress{Done: 150, Total: 150, Files: 3, FilesTotal: 3, Final: true}},
	}
	for i, st := range steps {
		got := tally.next(st.s, t0.Add(time.Duration(i)*time.Second), st.final)
		st.want.Op, st.want.Elapsed = "drain", time.Duration(i)*time.Second
		if got != st.want {
			t.Errorf("%s: got %+v, want %+v", st.name, got, st.want)
		}
	}
}
