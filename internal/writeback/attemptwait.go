package writeback

import (
	"context"
)

// cancelAttemptLocked cancels the running attempt, if any, with cause
// errCanceled (rename, remove) or errDetached.
func (f *File) cancelAttemptLocked(cause error) {
	if f.cancel != nil {
		f.cancel(cause)
	}
}

// endAttempt cancels the attempt running now, if any, with cause, and
// waits until it has ended (its requests returned), or ctx ends. Attempts
// started after the call are not waited for.
func (f *File) endAttempt(ctx context.Context, cause error) error {
	return f.waitAttempt(ctx, cause, false)
}

// endBaseReads is endAttempt for a caller that only needs the running
// attempt to stop reading its base: it also stops waiting once the attempt
// has no base read left (see baseReadsDone), for the attempt's last
// request, a Put that makes an object appear, is not cancelled (sendCtx)
// and may stall for as long as the store does.
func (f *File) endBaseReads(ctx context.Context, cause error) error {
	return f.waitAttempt(ctx, cause, true)
}

func (f *File) waitAttempt(ctx context.Context, cause error, baseOnly bool) error {
	f.mu.Lock()
	upTo := f.attemptsStarted
	for f.attemptsEnded < upTo && (!baseOnly || f.baseReadsDone < upTo) {
		if f.cancel != nil {
			f.cancel(cause)
		}
		done := f.done
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		f.mu.Lock()
	}
	f.mu.Unlock()
	return nil
}
