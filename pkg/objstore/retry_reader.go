package objstore

import (
	"context"
	"fmt"
	"io"
	"time"
)

// NewReader opens the body with retries (RequestTimeout bounds the open)
// and returns a reader that resumes a body failing mid-way; see WithRetry.
func (s *retryStore) NewReader(ctx context.Context, key string, off, length int64, opts ReadOptions) (Reader, error) {
	r := &retryReader{s: s, ctx: ctx, key: key, off: off, version: opts.IfVersion}
	if err := r.open(length); err != nil {
		return nil, err
	}
	r.info = r.cur.Info()
	size := r.info.Size
	switch {
	case off >= size:
		r.end = off
	case length < 0 || length > size-off:
		r.end = size
	default:
		r.end = off + length
	}
	if r.version == "" {
		r.version = r.info.Version
	}
	return r, nil
}

// retryReader is a body that resumes after failures. Like any io.Reader
// it is used by one goroutine at a time; its fields are not locked.
type retryReader struct {
	s    *retryStore
	ctx  context.Context // the caller's
	key  string
	info ObjectInfo // from the first open
	// version pins every reopen (IfVersion); empty disables resuming.
	version string
	off     int64 // offset of the next byte to read
	end     int64 // offset the body must reach before io.EOF is genuine
	fails   int   // consecutive failures without progress
	err     error // sticky result once the reader is done

	// The current attempt; cur is nil between a failure and the reopen.
	cur    Reader
	cancel context.CancelCauseFunc // ends cur's context
	body   context.Context         // cur's context
	timer  *time.Timer             // cancels body when one Read stalls; nil without RequestTimeout
}

// open opens the body at r.off for length bytes (< 0: to the end), with
// retries; the request timeout covers the open only.
func (r *retryReader) open(length int64) error {
	timeout := r.s.p.RequestTimeout
	return r.s.do(r.ctx, "NewReader", false, func(ctx context.Context) error {
		body, cancel := context.WithCancelCause(ctx)
		var timer *time.Timer
		if timeout > 0 {
			timer = time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
		}
		rd, err := r.s.inner.NewReader(body, r.key, r.off, length, ReadOptions{IfVersion: r.version})
		if timer != nil && !timer.Stop() {
			if err == nil {
				_ = rd.Close()
			}
			cancel(nil)
			return fmt.Errorf("NewReader: %w after %v: %v", errAttemptTimeout, timeout, err)
		}
		if err != nil {
			cancel(nil)
			return err
		}
		r.cur, r.cancel, r.body, r.timer = rd, cancel, body, timer
		return nil
	})
}

// drop closes the current attempt.
func (r *retryReader) drop() error {
	if r.cur == nil {
		return nil
	}
	err := r.cur.Close()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.cancel(nil)
	r.cur, r.cancel, r.body, r.timer = nil, nil, nil, nil
	return err
}

// readOnce reads from the current attempt, cancelling it when the Read
// stalls beyond the request timeout.
func (r *retryReader) readOnce(p []byte) (int, error) {
	if r.timer != nil {
		r.timer.Reset(r.s.p.RequestTimeout)
	}
	n, err := r.cur.Read(p)
	if r.timer != nil {
		r.timer.Stop()
	}
	if err != nil && err != io.EOF && context.Cause(r.body) == errAttemptTimeout && r.ctx.Err() == nil {
		err = fmt.Errorf("Read: body stalled for %v: %w: %v", r.s.p.RequestTimeout, errAttemptTimeout, err)
	}
	return n, err
}

// Read reads the body, resuming it after a Retryable failure or an early
// end. It fails with ErrPrecondition when the object changed before a
// resume, and with io.ErrUnexpectedEOF (wrapped) when the body ends early
// and cannot be resumed.
func (r *retryReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if r.cur == nil {
			if err := r.open(r.end - r.off); err != nil {
				r.err = err
				return 0, err
			}
		}
		n, err := r.readOnce(p)
		r.off += int64(n)
		if n > 0 {
			r.fails = 0
		}
		if err == nil {
			return n, nil
		}
		if r.off >= r.end && (err == io.EOF || (Retryable(err) && r.ctx.Err() == nil)) {
			// Every promised byte arrived; a failure after them is moot.
			r.err = io.EOF
			_ = r.drop()
			return n, io.EOF
		}
		if err == io.EOF {
			err = fmt.Errorf("objstore: body of %q ended at offset %d, before %d: %w", r.key, r.off, r.end, io.ErrUnexpectedEOF)
		}
		_ = r.drop()
		if r.ctx.Err() != nil {
			err = stopped(r.ctx, "Read", r.fails+1, err)
		}
		if !Retryable(err) || r.version == "" || r.fails+1 >= r.s.p.MaxAttempts {
			r.err = err
			if n > 0 {
				return n, nil // r.err comes back on the next call
			}
			return 0, err
		}
		r.fails++
		if r.s.p.OnRetry != nil {
			r.s.p.OnRetry("Read", r.fails, err)
		}
		if !sleepCtx(r.ctx, r.s.p.backoff(r.fails, err)) {
			r.err = stopped(r.ctx, "Read", r.fails, err)
			if n > 0 {
				return n, nil
			}
			return 0, r.err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// Close closes the current body; later Reads fail.
func (r *retryReader) Close() error {
	err := r.drop()
	if r.err == nil || r.err == io.EOF {
		r.err = fmt.Errorf("objstore: read of %q after Close", r.key)
	}
	return err
}

// Info describes the object version being read (from the first open).
func (r *retryReader) Info() ObjectInfo { return r.info }
