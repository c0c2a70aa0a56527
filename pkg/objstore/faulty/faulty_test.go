package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// TestConformanceNoFaults checks that the decorator is transparent.
func TestConformanceNoFaults(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{
		NewStore: func(t *testing.T) objstore.Store {
			return faulty.New(mem.New(mem.Options{MinPartSize: 1 << 10}), faulty.Config{})
		},
		PendingUploads: func(t *testing.T, s objstore.Store) int {
			return objstore.Unwrap(s).(*mem.Store).PendingUploads()
		},
	})
}

func newStore(t *testing.T, cfg faulty.Config) (*faulty.Store, *mem.Store) {
	t.Helper()
	m := mem.New(mem.Options{MinPartSize: 1 << 10})
	if _, err := m.Put(t.Context(), "k", bytes.NewReader([]byte("0123456789")), 10, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return faulty.New(m, cfg), m
}

func TestFail(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		cfg       faulty.Config
		op        string
		call      func(ctx context.Context, s *faulty.Store) error
		wantIs    error
		retryable bool
	}{
		{
			name: "rate one throttles",
			cfg:  faulty.Config{FailRate: map[string]float64{faulty.OpStat: 1}},
			op:   faulty.OpStat,
			call: func(ctx context.Context, s *faulty.Store) error {
				_, err := s.Stat(ctx, "k")
				return err
			},
			wantIs: objstore.ErrThrottled, retryable: true,
		},
		{
			name: "any op rate with chosen error",
			cfg:  faulty.Config{FailRate: map[string]float64{faulty.AnyOp: 1}, Err: faulty.ErrTransport},
			op:   faulty.OpDelete,
			call: func(ctx context.Context, s *faulty.Store) error {
				return s.Delete(ctx, "k", objstore.DeleteOptions{})
			},
			wantIs: faulty.ErrInjected, retryable: true,
		},
		{
			name: "function by key",
			cfg: faulty.Config{Fail: func(op, key string) error {
				if op == faulty.OpPut && key == "bad" {
					return boom
				}
				return nil
			}},
			op: faulty.OpPut,
			call: func(ctx context.Context, s *faulty.Store) error {
				if _, err := s.Put(ctx, "good", bytes.NewReader(nil), 0, objstore.PutOptions{}); err != nil {
					return err
				}
				_, err := s.Put(ctx, "bad", bytes.NewReader(nil), 0, objstore.PutOptions{})
				return err
			},
			wantIs: boom, retryable: true,
		},
		{
			name: "server error on copy",
			cfg: faulty.Config{Fail: func(op, key string) error {
				if op == faulty.OpCopy {
					return faulty.ServerError(op, key)
				}
				return nil
			}},
			op: faulty.OpCopy,
			call: func(ctx context.Context, s *faulty.Store) error {
				_, err := s.Copy(ctx, "k", "k2", objstore.CopyOptions{})
				return err
			},
			wantIs: faulty.ErrInjected, retryable: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t, tt.cfg)
			err := tt.call(t.Context(), s)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error = %v, want one wrapping %v", err, tt.wantIs)
			}
			if got := objstore.Retryable(err); got != tt.retryable {
				t.Errorf("Retryable = %v, want %v", got, tt.retryable)
			}
			if s.Injected(tt.op) != 1 {
				t.Errorf("Injected(%s) = %d, want 1", tt.op, s.Injected(tt.op))
			}
		})
	}
}

func TestFailRateIsSeeded(t *testing.T) {
	count := func(seed uint64) []bool {
		s, _ := newStore(t, faulty.Config{Seed: seed, FailRate: map[string]float64{faulty.OpStat: 0.5}})
		var out []bool
		for range 200 {
			_, err := s.Stat(t.Context(), "k")
			out = append(out, err != nil)
		}
		if s.Calls(faulty.OpStat) != 200 {
			t.Errorf("Calls = %d, want 200", s.Calls(faulty.OpStat))
		}
		return out
	}
	a, b := count(7), count(7)
	fails := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d differs between runs with the same seed", i)
		}
		if a[i] {
			fails++
		}
	}
	if fails < 60 || fails > 140 {
		t.Errorf("%d of 200 calls failed at rate 0.5", fails)
	}
}

func TestStall(t *testing.T) {
	t.Run("until context done", func(t *testing.T) {
		s, _ := newStore(t, faulty.Config{StallRate: map[string]float64{faulty.OpList: 1}})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		_, err := s.List(ctx, objstore.ListOptions{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("List = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("for a duration", func(t *testing.T) {
		s, _ := newStore(t, faulty.Config{Stall: func(op, key string) time.Duration {
			if op == faulty.OpStat {
				return 30 * time.Millisecond
			}
			return 0
		}})
		start := time.Now()
		if _, err := s.Stat(t.Context(), "k"); err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Errorf("Stat returned after %v, want a 30ms stall", d)
		}
	})
	t.Run("read", func(t *testing.T) {
		s, _ := newStore(t, faulty.Config{Stall: func(op, key string) time.Duration {
			if op == faulty.OpRead {
				return faulty.Forever
			}
			return 0
		}})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		r, err := s.NewReader(ctx, "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatalf("NewReader: %v", err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Read = %v, want DeadlineExceeded", err)
		}
	})
}

func TestCut(t *testing.T) {
	tests := []struct {
		name    string
		n       int64
		err     error
		want    string
		wantErr error
	}{
		{name: "transport error", n: 4, want: "0123", wantErr: faulty.ErrTransport},
		{name: "silent truncation", n: 3, err: io.EOF, want: "012"},
		{name: "at once", n: 0, want: "", wantErr: faulty.ErrTransport},
		{name: "beyond the end", n: 100, want: "0123456789"},
		{name: "no cut", n: -1, want: "0123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t, faulty.Config{Cut: func(key string, off, length int64) (int64, error) {
				return tt.n, tt.err
			}})
			r, err := s.NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if string(got) != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("ReadAll = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			if r.Info().Size != 10 {
				t.Errorf("Info().Size = %d, want 10", r.Info().Size)
			}
		})
	}
}

func TestMultipartFaults(t *testing.T) {
	s, m := newStore(t, faulty.Config{Fail: func(op, key string) error {
		if op == faulty.OpUploadPart {
			return faulty.Throttled(op, key)
		}
		return nil
	}})
	u, err := s.CreateUpload(t.Context(), "mp", objstore.PutOptions{})
	if err != nil {
		t.Fatalf("CreateUpload: %v", err)
	}
	err = u.UploadPart(t.Context(), 1, bytes.NewReader([]byte("x")), 1)
	if !errors.Is(err, objstore.ErrThrottled) {
		t.Errorf("UploadPart = %v, want ErrThrottled", err)
	}
	if err := s.AbortUpload(t.Context(), "mp", u.ID()); err != nil {
		t.Errorf("AbortUpload: %v", err)
	}
	if m.PendingUploads() != 0 {
		t.Errorf("PendingUploads = %d after AbortUpload", m.PendingUploads())
	}
}

// plainStore hides the inner store's Multipart methods.
type plainStore struct{ objstore.Store }

func TestMultipartUnsupported(t *testing.T) {
	s := faulty.New(plainStore{Store: mem.New(mem.Options{})}, faulty.Config{})
	if _, err := s.CreateUpload(t.Context(), "k", objstore.PutOptions{}); !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("CreateUpload = %v, want ErrUnsupported", err)
	}
	if err := s.AbortUpload(t.Context(), "k", "id"); !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("AbortUpload = %v, want ErrUnsupported", err)
	}
}
