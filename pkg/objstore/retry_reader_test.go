package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// cutFirst cuts the first n opened bodies after at bytes with err.
func cutFirst(n int, at int64, err error) func(string, int64, int64) (int64, error) {
	var opens atomic.Int64
	return func(key string, off, length int64) (int64, error) {
		if opens.Add(1) <= int64(n) {
			return at, err
		}
		return -1, nil
	}
}

func TestRetryReaderResume(t *testing.T) {
	tests := []struct {
		name        string
		cut         func(string, int64, int64) (int64, error)
		off, length int64
		want        string
		opens       int
		retries     int
	}{
		{name: "whole", cut: cutFirst(0, 0, nil), off: 0, length: -1, want: "0123456789", opens: 1},
		{name: "transport error", cut: cutFirst(1, 3, nil), off: 0, length: -1, want: "0123456789", opens: 2, retries: 1},
		{name: "silent truncation", cut: cutFirst(1, 3, io.EOF), off: 0, length: -1, want: "0123456789", opens: 2, retries: 1},
		{name: "cut at once twice", cut: cutFirst(2, 0, nil), off: 0, length: -1, want: "0123456789", opens: 3, retries: 2},
		{name: "range", cut: cutFirst(2, 2, io.EOF), off: 2, length: 5, want: "23456", opens: 3, retries: 2},
		{name: "range past end", cut: cutFirst(1, 2, nil), off: 6, length: 100, want: "6789", opens: 2, retries: 1},
		{name: "empty range", cut: cutFirst(1, 0, nil), off: 10, length: -1, want: "", opens: 1},
		{name: "error after the last byte", cut: cutFirst(1, 5, nil), off: 0, length: 5, want: "01234", opens: 1},
		{name: "many cuts with progress", cut: cutFirst(100, 1, nil), off: 0, length: -1, want: "0123456789", opens: 10, retries: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newFaulty(t, faulty.Config{Cut: tt.cut})
			var c counter
			p := fast
			p.OnRetry = c.onRetry
			got := readAll(t, objstore.WithRetry(f, p), "k", tt.off, tt.length)
			if got != tt.want {
				t.Errorf("read %q, want %q", got, tt.want)
			}
			if n := f.Calls(faulty.OpNewReader); n != tt.opens {
				t.Errorf("opened %d times, want %d", n, tt.opens)
			}
			if c.count() != tt.retries {
				t.Errorf("OnRetry called %d times (%v), want %d", c.count(), c.calls, tt.retries)
			}
		})
	}
}

func TestRetryReaderFailures(t *testing.T) {
	t.Run("gives up without progress", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{Cut: cutFirst(100, 0, nil)})
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); !errors.Is(err, faulty.ErrTransport) {
			t.Errorf("ReadAll = %v, want ErrTransport", err)
		}
		if n := f.Calls(faulty.OpNewReader); n != fast.MaxAttempts {
			t.Errorf("opened %d times, want %d", n, fast.MaxAttempts)
		}
	})
	t.Run("silent truncation is an error", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{Cut: cutFirst(100, 0, io.EOF)})
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadAll = %v, want ErrUnexpectedEOF", err)
		}
	})
	t.Run("object changed before resume", func(t *testing.T) {
		var m interface {
			Put(context.Context, string, io.ReaderAt, int64, objstore.PutOptions) (objstore.ObjectInfo, error)
		}
		f, mm := newFaulty(t, faulty.Config{Cut: func(key string, off, length int64) (int64, error) {
			if off == 0 {
				// Overwrite while the first body is in flight.
				if _, err := m.Put(context.Background(), "k", bytes.NewReader([]byte("changed")), 7, objstore.PutOptions{}); err != nil {
					return -1, nil
				}
				return 4, nil
			}
			return -1, nil
		}})
		m = mm
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if !errors.Is(err, objstore.ErrPrecondition) {
			t.Errorf("ReadAll = %q, %v; want ErrPrecondition", got, err)
		}
		if string(got) != "0123" {
			t.Errorf("read %q before the failure, want 0123", got)
		}
	})
	t.Run("final read error", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{Fail: func(op, key string) error {
			if op == faulty.OpRead {
				return objstore.ErrPermission
			}
			return nil
		}})
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); !errors.Is(err, objstore.ErrPermission) {
			t.Errorf("ReadAll = %v, want ErrPermission", err)
		}
		if n := f.Calls(faulty.OpNewReader); n != 1 {
			t.Errorf("opened %d times, want 1", n)
		}
	})
	t.Run("read after close", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{})
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 0, -1, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(make([]byte, 4)); err == nil || err == io.EOF {
			t.Errorf("Read after Close = %v, want an error", err)
		}
	})
	t.Run("info", func(t *testing.T) {
		f, m := newFaulty(t, faulty.Config{Cut: cutFirst(1, 2, nil)})
		st, _ := m.Stat(t.Context(), "k")
		r, err := objstore.WithRetry(f, fast).NewReader(t.Context(), "k", 3, 2, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
		if info := r.Info(); info.Size != 10 || info.Version != st.Version {
			t.Errorf("Info = %+v, want size 10 version %q", info, st.Version)
		}
	})
}
