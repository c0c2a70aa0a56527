package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// fast is a policy that keeps tests quick.
var fast = objstore.RetryPolicy{Base: time.Millisecond, Max: 2 * time.Millisecond, MaxAttempts: 5}

// memOf digs the mem store out of decorators.
func memOf(s objstore.Store) *mem.Store {
	for s != nil {
		if m, ok := s.(*mem.Store); ok {
			return m
		}
		s = objstore.Unwrap(s)
	}
	return nil
}

func TestRetryConformance(t *testing.T) {
	pending := func(t *testing.T, s objstore.Store) int { return memOf(s).PendingUploads() }
	t.Run("transparent", func(t *testing.T) {
		objstoretest.Run(t, objstoretest.Harness{
			NewStore: func(t *testing.T) objstore.Store {
				return objstore.WithRetry(mem.New(mem.Options{MinPartSize: 1 << 10}), fast)
			},
			PendingUploads: pending,
		})
	})
	// A flaky store behind WithRetry must look like a healthy one.
	t.Run("flaky", func(t *testing.T) {
		var seed atomic.Uint64
		objstoretest.Run(t, objstoretest.Harness{
			NewStore: func(t *testing.T) objstore.Store {
				n := seed.Add(1)
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(n, 1))
				f := faulty.New(mem.New(mem.Options{MinPartSize: 1 << 10}), faulty.Config{
					Seed:     n,
					FailRate: map[string]float64{faulty.AnyOp: 0.2},
					// A third of the bodies are cut, half of those silently.
					Cut: func(key string, off, length int64) (int64, error) {
						mu.Lock()
						defer mu.Unlock()
						switch rng.IntN(6) {
						case 0:
							return rng.Int64N(64), io.EOF
						case 1:
							return rng.Int64N(64), nil
						}
						return -1, nil
					},
				})
				p := fast
				p.MaxAttempts = 12
				return objstore.WithRetry(f, p)
			},
			PendingUploads: pending,
		})
	})
}

// counter records OnRetry calls.
type counter struct {
	mu    sync.Mutex
	calls []string
}

func (c *counter) onRetry(op string, attempt int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, op)
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// failTimes returns a Fail function failing op with err the first n times.
func failTimes(op string, n int, err error) func(string, string) error {
	var left atomic.Int64
	left.Store(int64(n))
	return func(o, key string) error {
		if o == op && left.Add(-1) >= 0 {
			return err
		}
		return nil
	}
}

func newFaulty(t *testing.T, cfg faulty.Config) (*faulty.Store, *mem.Store) {
	t.Helper()
	m := mem.New(mem.Options{MinPartSize: 1 << 10})
	if _, err := m.Put(t.Context(), "k", bytes.NewReader([]byte("0123456789")), 10, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return faulty.New(m, cfg), m
}

func TestRetryCalls(t *testing.T) {
	tests := []struct {
		name      string
		fail      func(string, string) error
		wantCalls int
		wantIs    error // nil: success
		retries   int
	}{
		{name: "success", wantCalls: 1},
		{name: "throttled twice", fail: failTimes(faulty.OpStat, 2, faulty.Throttled("Stat", "k")), wantCalls: 3, retries: 2},
		{name: "transport then success", fail: failTimes(faulty.OpStat, 1, faulty.ErrTransport), wantCalls: 2, retries: 1},
		{name: "final error is not retried", fail: failTimes(faulty.OpStat, 1, objstore.ErrPermission), wantCalls: 1, wantIs: objstore.ErrPermission},
		{name: "attempts run out", fail: failTimes(faulty.OpStat, 100, faulty.ServerError("Stat", "k")), wantCalls: 5, wantIs: faulty.ErrInjected, retries: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newFaulty(t, faulty.Config{Fail: tt.fail})
			var c counter
			p := fast
			p.OnRetry = c.onRetry
			s := objstore.WithRetry(f, p)
			info, err := s.Stat(t.Context(), "k")
			if tt.wantIs == nil && (err != nil || info.Size != 10) {
				t.Errorf("Stat = %+v, %v; want size 10", info, err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Stat error = %v, want one wrapping %v", err, tt.wantIs)
			}
			if got := f.Calls(faulty.OpStat); got != tt.wantCalls {
				t.Errorf("inner calls = %d, want %d", got, tt.wantCalls)
			}
			if c.count() != tt.retries {
				t.Errorf("OnRetry called %d times, want %d", c.count(), tt.retries)
			}
		})
	}
}

func TestRetryNotFoundIsFinal(t *testing.T) {
	f, _ := newFaulty(t, faulty.Config{})
	s := objstore.WithRetry(f, fast)
	if _, err := s.Stat(t.Context(), "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(missing) = %v, want ErrNotFound", err)
	}
	if f.Calls(faulty.OpStat) != 1 {
		t.Errorf("inner calls = %d, want 1", f.Calls(faulty.OpStat))
	}
}

func TestRetryEveryOp(t *testing.T) {
	f, m := newFaulty(t, faulty.Config{FailRate: map[string]float64{faulty.AnyOp: 0.5}, Seed: 3})
	p := fast
	p.MaxAttempts = 20
	s := objstore.WithRetry(f, p)
	ctx := t.Context()
	ops := []struct {
		op   string
		call func() error
	}{
		{op: faulty.OpPut, call: func() error {
			_, err := s.Put(ctx, "p", bytes.NewReader([]byte("abc")), 3, objstore.PutOptions{})
			return err
		}},
		{op: faulty.OpList, call: func() error {
			_, err := s.List(ctx, objstore.ListOptions{})
			return err
		}},
		{op: faulty.OpCopy, call: func() error {
			_, err := s.Copy(ctx, "p", "q", objstore.CopyOptions{})
			return err
		}},
		{op: faulty.OpDelete, call: func() error { return s.Delete(ctx, "q", objstore.DeleteOptions{}) }},
		{op: faulty.OpNewReader, call: func() error {
			r, err := s.NewReader(ctx, "p", 0, -1, objstore.ReadOptions{})
			if err != nil {
				return err
			}
			defer r.Close()
			b, err := io.ReadAll(r)
			if err == nil && string(b) != "abc" {
				err = errors.New("wrong content " + string(b))
			}
			return err
		}},
	}
	for _, o := range ops {
		for i := range 10 {
			if err := o.call(); err != nil {
				t.Fatalf("%s #%d: %v", o.op, i, err)
			}
		}
		if f.Injected(o.op) == 0 {
			t.Errorf("%s: no fault injected in 10 calls at rate 0.5", o.op)
		}
	}
	if m.Len() != 2 {
		t.Errorf("store has %d objects, want 2", m.Len())
	}
}

func TestRetryRequestTimeout(t *testing.T) {
	stallFirst := func(op string) func(string, string) time.Duration {
		var n atomic.Int64
		return func(o, key string) time.Duration {
			if o == op && n.Add(1) == 1 {
				return faulty.Forever
			}
			return 0
		}
	}
	p := fast
	p.RequestTimeout = 20 * time.Millisecond
	t.Run("Stat", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{Stall: stallFirst(faulty.OpStat)})
		if _, err := objstore.WithRetry(f, p).Stat(t.Context(), "k"); err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if f.Calls(faulty.OpStat) != 2 {
			t.Errorf("inner calls = %d, want 2", f.Calls(faulty.OpStat))
		}
	})
	t.Run("NewReader open", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{Stall: stallFirst(faulty.OpNewReader)})
		got := readAll(t, objstore.WithRetry(f, p), "k", 0, -1)
		if got != "0123456789" || f.Calls(faulty.OpNewReader) != 2 {
			t.Errorf("read %q with %d opens, want all with 2", got, f.Calls(faulty.OpNewReader))
		}
	})
	t.Run("stalled body", func(t *testing.T) {
		var reads atomic.Int64
		f, _ := newFaulty(t, faulty.Config{
			Cut: func(key string, off, length int64) (int64, error) { return 4, nil },
			Stall: func(op, key string) time.Duration {
				if op == faulty.OpRead && reads.Add(1) == 2 {
					return faulty.Forever
				}
				return 0
			},
		})
		got := readAll(t, objstore.WithRetry(f, p), "k", 0, -1)
		if got != "0123456789" {
			t.Errorf("read %q", got)
		}
	})
	// In a synctest bubble: the reads' stalls and the request timeout run
	// on the bubble's clock, so that a loaded machine, which may wake a
	// 5 ms sleeper 20 ms late, cannot cut the body (it did under load).
	t.Run("timeout does not cut a slow body", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, _ := newFaulty(t, faulty.Config{Stall: func(op, key string) time.Duration {
				if op == faulty.OpRead {
					return 5 * time.Millisecond
				}
				return 0
			}})
			q := p
			q.MaxAttempts = 1
			r, err := objstore.WithRetry(f, q).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			start := time.Now()
			buf := make([]byte, 1)
			var got []byte
			for {
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("Read after %q: %v", got, err)
				}
			}
			if string(got) != "0123456789" {
				t.Errorf("read %q", got)
			}
			if d := time.Since(start); d <= p.RequestTimeout {
				t.Errorf("the body took %v, not more than the request timeout %v: the test proves nothing", d, p.RequestTimeout)
			}
		})
	})
}

func TestRetryContext(t *testing.T) {
	t.Run("canceled during backoff", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{FailRate: map[string]float64{faulty.OpStat: 1}})
		p := objstore.RetryPolicy{Base: time.Hour, Max: time.Hour}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := objstore.WithRetry(f, p).Stat(ctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, objstore.ErrThrottled) {
			t.Errorf("Stat = %v, want DeadlineExceeded and the last error", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Stat took %v after the context ended", d)
		}
	})
	t.Run("canceled before", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := objstore.WithRetry(f, fast).Stat(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Stat = %v, want Canceled", err)
		}
		if f.Calls(faulty.OpStat) > 1 {
			t.Errorf("inner calls = %d, want at most 1", f.Calls(faulty.OpStat))
		}
	})
}

func readAll(t *testing.T, s objstore.Store, key string, off, length int64) string {
	t.Helper()
	r, err := s.NewReader(t.Context(), key, off, length, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	return string(b)
}

func TestUnwrap(t *testing.T) {
	m := mem.New(mem.Options{})
	f := faulty.New(m, faulty.Config{})
	s := objstore.WithRetry(f, fast)
	if objstore.Unwrap(s) != objstore.Store(f) || objstore.Unwrap(f) != objstore.Store(m) || objstore.Unwrap(m) != nil {
		t.Error("Unwrap does not walk retry -> faulty -> mem -> nil")
	}
}
