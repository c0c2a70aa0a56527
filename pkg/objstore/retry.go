package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Default RetryPolicy values.
const (
	DefaultRetryBase      = 100 * time.Millisecond
	DefaultRetryMax       = 5 * time.Second
	DefaultMaxAttempts    = 8
	DefaultRequestTimeout = 60 * time.Second
	DefaultThrottleScale  = 4
)

// errAttemptTimeout marks an attempt cut by RetryPolicy.RequestTimeout. It
// is not a context error, so Retryable reports it as retryable.
var errAttemptTimeout = errors.New("objstore: request attempt timed out")

// RetryPolicy configures WithRetry. Zero fields take the defaults.
type RetryPolicy struct {
	// Base is the backoff ceiling of the first retry; it doubles with
	// every attempt up to Max. Default 100 ms.
	Base time.Duration
	// Max caps the backoff. Default 5 s.
	Max time.Duration
	// MaxAttempts bounds the attempts of one call, the first included;
	// 1 disables retries. Default 8.
	MaxAttempts int
	// RequestTimeout bounds one attempt: the whole call for Stat, List,
	// Put, Copy, Delete and the Upload methods; opening the body for
	// NewReader, and then each single Read of the body (a stalled body is
	// resumed). Default 60 s; negative disables it.
	RequestTimeout time.Duration
	// ThrottleScale multiplies the backoff ceiling after a throttled error
	// (ErrThrottled, HTTP 429/503 mapped by the driver), whose backoff also
	// keeps a floor of half the ceiling. Default 4.
	ThrottleScale int
	// OnRetry, when set, is called before each retry with the operation
	// name ("Stat", "NewReader", "Read", "UploadPart", …), the number of
	// the attempt that failed (1 for the first) and its error. It must be
	// safe for concurrent use and must not block.
	OnRetry func(op string, attempt int, err error)
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Base <= 0 {
		p.Base = DefaultRetryBase
	}
	if p.Max <= 0 {
		p.Max = DefaultRetryMax
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.RequestTimeout == 0 {
		p.RequestTimeout = DefaultRequestTimeout
	}
	if p.ThrottleScale <= 0 {
		p.ThrottleScale = DefaultThrottleScale
	}
	return p
}

// backoff returns the wait after failed attempt n (1-based): full jitter
// in [0, min(Max, Base·2^(n-1))), or for throttling a wait in [c/2, c)
// with the ceiling c scaled by ThrottleScale.
func (p RetryPolicy) backoff(n int, err error) time.Duration {
	ceil := p.Base
	for i := 1; i < n && ceil < p.Max; i++ {
		ceil *= 2
	}
	ceil = min(ceil, p.Max)
	if errors.Is(err, ErrThrottled) {
		ceil = min(ceil*time.Duration(p.ThrottleScale), p.Max*time.Duration(p.ThrottleScale))
		return ceil/2 + rand.N(ceil/2+1)
	}
	return rand.N(ceil + 1)
}

// WithRetry returns s with retries: each call whose error is Retryable is
// tried again, up to p.MaxAttempts attempts, after an exponential backoff
// with jitter, each attempt bounded by p.RequestTimeout; the caller's
// context cancellation stops at once. Final errors (ErrNotFound,
// ErrPrecondition, …) come back unchanged; when attempts run out the last
// error comes back wrapped, so errors.Is still sees its sentinels.
//
// Readers from NewReader resume a body that fails mid-way (a Retryable
// error, or an early end: io.ErrUnexpectedEOF) by reopening at the current
// offset with IfVersion set to the version first read, so a resumed body
// never mixes versions; a changed object fails with ErrPrecondition.
//
// When s implements Multipart, so does the result, and Upload's
// UploadPart, CopyPart, Complete and Abort are retried as well.
//
// A retried write is not idempotent on the server: a Put with IfAbsent
// whose first attempt landed but timed out fails its retry with
// ErrPrecondition, and a Complete whose first attempt landed fails its
// retry with ErrNotFound. Callers that care check with Stat.
func WithRetry(s Store, p RetryPolicy) Store {
	rs := &retryStore{inner: s, p: p.withDefaults()}
	if mp, ok := s.(Multipart); ok {
		return &retryMultipart{retryStore: rs, mp: mp}
	}
	return rs
}

// Unwrap returns the store that the decorator s wraps (one with a method
// Unwrap() Store, such as the result of WithRetry), or nil when s is not a
// decorator.
func Unwrap(s Store) Store {
	if u, ok := s.(interface{ Unwrap() Store }); ok {
		return u.Unwrap()
	}
	return nil
}

// retryStore is the Store returned by WithRetry. It is immutable.
type retryStore struct {
	inner Store
	p     RetryPolicy
}

// retryMultipart is a retryStore over a Multipart store.
type retryMultipart struct {
	*retryStore
	mp Multipart
}

var (
	_ Store     = (*retryStore)(nil)
	_ Multipart = (*retryMultipart)(nil)
)

// Unwrap returns the inner store.
func (s *retryStore) Unwrap() Store { return s.inner }

func (s *retryStore) Caps() Caps { return s.inner.Caps() }

func (s *retryStore) Close() error { return s.inner.Close() }

// do calls fn until it succeeds, fails finally, runs out of attempts or
// ctx is done. With timed, each attempt's context has the request timeout.
func (s *retryStore) do(ctx context.Context, op string, timed bool, fn func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if timed && s.p.RequestTimeout > 0 {
			actx, cancel = context.WithTimeoutCause(ctx, s.p.RequestTimeout, errAttemptTimeout)
		}
		err := fn(actx)
		if err != nil && ctx.Err() == nil && context.Cause(actx) == errAttemptTimeout {
			err = fmt.Errorf("%s: %w after %v: %v", op, errAttemptTimeout, s.p.RequestTimeout, err)
		}
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return stopped(ctx, op, attempt, err)
		}
		if !Retryable(err) {
			return err
		}
		if attempt >= s.p.MaxAttempts {
			return fmt.Errorf("%s: giving up after %d attempts: %w", op, attempt, err)
		}
		if s.p.OnRetry != nil {
			s.p.OnRetry(op, attempt, err)
		}
		if !sleepCtx(ctx, s.p.backoff(attempt, err)) {
			return stopped(ctx, op, attempt, err)
		}
	}
}

// stopped is the error of a call whose context ended: it wraps the
// context's error (and the last attempt's error when that is another).
func stopped(ctx context.Context, op string, attempt int, last error) error {
	cause := context.Cause(ctx)
	if errors.Is(last, cause) {
		return last
	}
	return fmt.Errorf("%s: %w (after %d attempts; last error: %w)", op, cause, attempt, last)
}

// sleepCtx waits d; it returns false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stat retries the inner Stat.
func (s *retryStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	var info ObjectInfo
	err := s.do(ctx, "Stat", true, func(ctx context.Context) error {
		var err error
		info, err = s.inner.Stat(ctx, key)
		return err
	})
	return info, err
}

// List retries the inner List.
func (s *retryStore) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	var page ListPage
	err := s.do(ctx, "List", true, func(ctx context.Context) error {
		var err error
		page, err = s.inner.List(ctx, opts)
		return err
	})
	return page, err
}

// Put retries the inner Put, re-reading src from its start each attempt.
func (s *retryStore) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts PutOptions) (ObjectInfo, error) {
	var info ObjectInfo
	err := s.do(ctx, "Put", true, func(ctx context.Context) error {
		var err error
		info, err = s.inner.Put(ctx, key, src, size, opts)
		return err
	})
	return info, err
}

// Copy retries the inner Copy.
func (s *retryStore) Copy(ctx context.Context, src, dst string, opts CopyOptions) (ObjectInfo, error) {
	var info ObjectInfo
	err := s.do(ctx, "Copy", true, func(ctx context.Context) error {
		var err error
		info, err = s.inner.Copy(ctx, src, dst, opts)
		return err
	})
	return info, err
}

// Delete retries the inner Delete.
func (s *retryStore) Delete(ctx context.Context, key string, opts DeleteOptions) error {
	return s.do(ctx, "Delete", true, func(ctx context.Context) error {
		return s.inner.Delete(ctx, key, opts)
	})
}
