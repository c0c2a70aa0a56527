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

// DrainError names every file that is not durable.
type DrainError struct {
	Failures []Failure
}

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

// errStillOpen is the cause reported for a file never released.
var errStillOpen = errors.New("still open at the drain deadline")

// Drain waits until every dirty file is durable (and every renamed file's
// old name deleted), retrying failed uploads (at once, then with backoff)
// until ctx ends. Files still open are waited for. OrderLast is honoured.
// It returns nil only when every byte is in the bucket; otherwise a
// *DrainError naming each file, each also logged with its cause. Staged
// data of failed files stays in the journal for a later New.
func (m *Manager) Drain(ctx context.Context) error {
	m.mu.Lock()
	all := make([]*File, 0, len(m.byID))
	for _, f := range m.byID {
		all = append(all, f)
	}
	m.mu.Unlock()
	for _, f := range all {
		f.mu.Lock()
		d, c := f.wantsLocked()
		f.mu.Unlock()
		if d || c {
			f.kick()
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		ch := m.changedCh()
		pending, progress := m.drainState()
		switch {
		case len(pending) == 0:
			return nil
		case !progress:
			break wait // every pending file failed finally
		}
		select {
		case <-ch:
		case <-tick.C:
			for _, f := range pending { // a safety net: nothing may idle
				f.mu.Lock()
				idle := !f.uploading && !f.final && f.refs == 0
				f.mu.Unlock()
				if idle {
					f.kick()
				}
			}
		case <-ctx.Done():
			break wait
		}
	}
	pending, _ := m.drainState()
	if len(pending) == 0 {
		return nil
	}
	de := &DrainError{}
	for _, f := range pending {
		f.mu.Lock()
		fl := Failure{Target: f.target, Err: f.lastErr}
		if f.refs > 0 && f.gen > f.durableGen {
			fl.Err = errStillOpen
		} else if fl.Err == nil {
			fl.Err = fmt.Errorf("not uploaded before the drain deadline: %w", context.Cause(ctx))
		}
		if len(f.deleteAfter) > 0 && (f.removed || f.gen == f.durableGen) {
			fl.Err = fmt.Errorf("old name %s not deleted: %w", f.deleteAfter[0].Key, fl.Err)
		}
		f.mu.Unlock()
		de.Failures = append(de.Failures, fl)
		attrs := []any{"path", fl.Target.String(), "err", fl.Err}
		var oe *objstore.Error
		if errors.As(fl.Err, &oe) && oe.RequestID != "" {
			attrs = append(attrs, "request_id", oe.RequestID)
		}
		m.log.Error("writeback: not durable", attrs...)
	}
	return de
}

// drainState returns the files Drain still waits for, and whether any of
// them can make progress (is open, uploading or retrying, or waits for an
// order that can still be satisfied).
func (m *Manager) drainState() (pending []*File, progress bool) {
	m.mu.Lock()
	all := make([]*File, 0, len(m.byID))
	for _, f := range m.byID {
		all = append(all, f)
	}
	m.mu.Unlock()
	var waiting []*File
	for _, f := range all {
		f.mu.Lock()
		data := f.live && !f.removed && f.gen > f.durableGen
		dels := f.live && len(f.deleteAfter) > 0
		stuck := f.final && !f.uploading && f.refs == 0
		open := f.refs > 0
		uploading := f.uploading
		f.mu.Unlock()
		if !data && !dels {
			continue
		}
		pending = append(pending, f)
		switch {
		case open || (!stuck && !uploading):
			progress = true // to be closed, or to be kicked (Sync, retry)
		case stuck:
		case m.orderLast(f):
			waiting = append(waiting, f)
		default:
			progress = true
		}
	}
	for _, f := range waiting {
		if progress {
			break
		}
		progress = m.eligible(f)
	}
	return pending, progress
}

func (m *Manager) orderLast(f *File) bool {
	return m.cfg.OrderLast != nil && m.cfg.OrderLast(f.Target().Key)
}
