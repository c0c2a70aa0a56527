package objstore

import (
	"errors"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second}.withDefaults()
	throttled := &Error{Status: 503, Kind: ErrThrottled}
	other := errors.New("connection reset")
	tests := []struct {
		attempt int
		err     error
		lo, hi  time.Duration
	}{
		{attempt: 1, err: other, lo: 0, hi: 100 * time.Millisecond},
		{attempt: 2, err: other, lo: 0, hi: 200 * time.Millisecond},
		{attempt: 4, err: other, lo: 0, hi: 800 * time.Millisecond},
		{attempt: 5, err: other, lo: 0, hi: time.Second},
		{attempt: 60, err: other, lo: 0, hi: time.Second},
		{attempt: 1, err: throttled, lo: 200 * time.Millisecond, hi: 400 * time.Millisecond},
		{attempt: 3, err: throttled, lo: 800 * time.Millisecond, hi: 1600 * time.Millisecond},
		{attempt: 60, err: throttled, lo: 2 * time.Second, hi: 4 * time.Second},
	}
	for _, tt := range tests {
		var sum time.Duration
		const n = 200
		for range n {
			d := p.backoff(tt.attempt, tt.err)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("backoff(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.err, d, tt.lo, tt.hi)
			}
			sum += d
		}
		// Jitter spreads the waits over the range.
		if mean := sum / n; mean < tt.lo+(tt.hi-tt.lo)/4 || mean > tt.hi-(tt.hi-tt.lo)/4 {
			t.Errorf("backoff(%d, %v) mean %v, want near the middle of [%v, %v]", tt.attempt, tt.err, mean, tt.lo, tt.hi)
		}
	}
}

func TestRetryPolicyDefaults(t *testing.T) {
	p := RetryPolicy{}.withDefaults()
	want := RetryPolicy{Base: DefaultRetryBase, Max: DefaultRetryMax, MaxAttempts: DefaultMaxAttempts,
		RequestTimeout: DefaultRequestTimeout, ThrottleScale: DefaultThrottleScale}
	if p.Base != want.Base || p.Max != want.Max || p.MaxAttempts != want.MaxAttempts ||
		p.RequestTimeout != want.RequestTimeout || p.ThrottleScale != want.ThrottleScale {
		t.Errorf("defaults = %+v, want %+v", p, want)
	}
	if q := (RetryPolicy{RequestTimeout: -1}).withDefaults(); q.RequestTimeout >= 0 {
		t.Errorf("negative RequestTimeout became %v, want disabled", q.RequestTimeout)
	}
}
