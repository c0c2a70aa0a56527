package writeback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Failure is one file Drain could not make durable.
type Failure struct {
	Target Target
	Err    error
}

// DrainError names every file that is not durable. Its staged data stays
// in the journal: a later New on the same Dir uploads it.
type DrainError struct {
	Failures []Failure
}

// Error names the files (the first ten).
func (e *DrainError) Error() string {
	names := make([]string, 0, len(e.Failures))
	for i, f := range e.Failures {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(e.Failures)-10))
			break
		}
		names = append(names, f.Target.String())
	}
	return fmt.Sprintf("writeback: %d file(s) not durable: %s", len(e.Failures), strings.Join(names, ", "))
}

// Causes reported for files that never failed an upload attempt.
var (
	errStillOpen  = errors.New("still open at the drain deadline")
	errOrderWait  = errors.New("waits for the other files of its directory (it must be uploaded last)")
	errNotStarted = errors.New("not uploaded before the drain deadline")
)

// drainTick is how often Drain re-checks that no pending file idles;
// drainCoalesce is the least time between two of its rescans.
const (
	drainTick     = time.Second
	drainCoalesce = 2 * time.Millisecond
)

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Drain waits until every closed file is durable (and every renamed file's
// old name deleted), retrying failed uploads (at once, then with backoff)
// until ctx ends. Files still open are waited for until then. OrderLast is
// honoured. It returns nil only when every byte is in the bucket;
// otherwise a *DrainError naming each file, each also logged with its
// cause (and, for an *objstore.Error, the HTTP status and request id). It
// returns early when every pending file failed with a final error (or
// waits for one that did). Staged data of failed files stays with its
// journal record for a later New.
func (m *Manager) Drain(ctx context.Context) error {
	defer m.sched.hurry(false)() // the task waits: upload at full speed (the node's other tasks first)
	m.releaseLast()
	for _, f := range m.liveFiles() {
		f.mu.Lock()
		d, c := f.wantsLocked()
		f.mu.Unlock()
		if d || c {
			f.kick() // also retries a final failure once more
		}
	}
	tick := time.NewTicker(drainTick)
	defer tick.Stop()
wait:
	for {
		ch := m.changedCh()
		st := m.drainState()
		switch {
		case len(st.busy) == 0:
			return nil
		case !st.progress:
			break wait // every pending file failed finally
		}
		select {
		case <-ch:
			// Coalesce bursts of changes: every rescan visits every file.
			if !sleepCtx(ctx, drainCoalesce) {
				break wait
			}
		case <-tick.C:
			for _, f := range st.busy { // a safety net: nothing may idle
				f.mu.Lock()
				d, c := f.wantsLocked()
				idle := (d || c) && !f.uploading && !(f.final && f.kicks == f.finalKicks)
				f.mu.Unlock()
				if idle {
					f.kick()
				}
			}
		case <-ctx.Done():
			break wait
		}
	}
	st := m.drainState()
	for _, f := range st.aborts {
		m.log.Warn("writeback: a multipart upload could not be aborted; its record stays, and the next ferry on this cache directory aborts it", "path", f.Target().String())
	}
	if len(st.failed) == 0 {
		return nil
	}
	de := &DrainError{}
	for _, f := range st.failed {
		fl := m.failure(ctx, f)
		de.Failures = append(de.Failures, fl)
		attrs := []any{"path", fl.Target.String(), "err", fl.Err}
		var oe *objstore.Error
		if errors.As(fl.Err, &oe) {
			if oe.Status != 0 {
				attrs = append(attrs, "status", oe.Status)
			}
			if oe.RequestID != "" {
				attrs = append(attrs, "request_id", oe.RequestID)
			}
		}
		m.log.Error("writeback: not durable", attrs...)
	}
	return de
}

// failure describes why f is not durable.
func (m *Manager) failure(ctx context.Context, f *File) Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := Failure{Target: f.target, Err: f.lastErr}
	dataPending := !f.removed && f.gen > f.durableGen
	switch {
	case dataPending && f.closedGen < f.gen:
		fl.Err = errStillOpen
	case fl.Err != nil:
	case dataPending && m.orderLastKey(f.target.Key):
		fl.Err = errOrderWait
	default:
		fl.Err = fmt.Errorf("%w: %w", errNotStarted, context.Cause(ctx))
	}
	if !dataPending && len(f.deleteAfter) > 0 {
		fl.Err = fmt.Errorf("old name %s not deleted: %w", f.deleteAfter[0].Key, fl.Err)
	}
	return fl
}

// drainView is what Drain waits for.
type drainView struct {
	busy     []*File // files with anything left to do (or a running loop)
	failed   []*File // of those, files whose data or old-name delete is pending
	aborts   []*File // of those, files with only aborts of old uploads left
	progress bool    // some busy file can still make progress
}

// drainState classifies the live files for Drain.
func (m *Manager) drainState() drainView {
	var v drainView
	var ordered []*File
	for _, f := range m.liveFiles() {
		f.mu.Lock()
		data := !f.removed && f.gen > f.durableGen
		dels := len(f.deleteAfter) > 0
		aborts := len(f.verify) > 0 || len(f.orphans) > 0 // and checks of an earlier run's uploads
		for _, u := range f.uploads {
			aborts = aborts || !u.owned
		}
		loop := f.uploading
		stuck := f.final && !f.uploading
		open := data && f.closedGen < f.gen // modified since its last close
		key := f.target.Key
		f.mu.Unlock()
		if !data && !dels && !aborts && !loop {
			continue
		}
		v.busy = append(v.busy, f)
		switch {
		case data || dels:
			v.failed = append(v.failed, f)
		case aborts:
			v.aborts = append(v.aborts, f)
		}
		switch {
		case open:
			v.progress = true // to be closed
		case stuck:
		case data && loop && m.orderLastKey(key):
			ordered = append(ordered, f) // maybe blocked for good
		default:
			v.progress = true // uploading, retrying, or to be kicked
		}
	}
	for _, f := range ordered {
		if v.progress {
			break
		}
		v.progress = m.eligible(f)
	}
	return v
}

// liveFiles returns every live file (dirty, open, or a stub with cleanup).
func (m *Manager) liveFiles() []*File {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*File, 0, len(m.byID))
	for _, f := range m.byID {
		all = append(all, f)
	}
	return all
}

func (m *Manager) orderLastKey(key string) bool {
	return m.cfg.OrderLast != nil && m.cfg.OrderLast(key)
}
