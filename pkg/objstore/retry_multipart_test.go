package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

func TestRetryMultipart(t *testing.T) {
	ops := []string{faulty.OpCreateUpload, faulty.OpUploadPart, faulty.OpCopyPart, faulty.OpComplete}
	for _, op := range ops {
		t.Run(op, func(t *testing.T) {
			f, m := newFaulty(t, faulty.Config{Fail: failTimes(op, 2, faulty.Throttled(op, "big"))})
			var c counter
			p := fast
			p.OnRetry = c.onRetry
			s := objstore.WithRetry(f, p)
			mp, ok := s.(objstore.Multipart)
			if !ok {
				t.Fatal("WithRetry over a Multipart store is not Multipart")
			}
			u, err := mp.CreateUpload(t.Context(), "big", objstore.PutOptions{})
			if err != nil {
				t.Fatalf("CreateUpload: %v", err)
			}
			part := bytes.Repeat([]byte("a"), 1<<10)
			if err := u.UploadPart(t.Context(), 1, bytes.NewReader(part), int64(len(part))); err != nil {
				t.Fatalf("UploadPart: %v", err)
			}
			if err := u.CopyPart(t.Context(), 2, "k", 0, 10); err != nil {
				t.Fatalf("CopyPart: %v", err)
			}
			info, err := u.Complete(t.Context())
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if info.Size != int64(len(part))+10 {
				t.Errorf("Size = %d", info.Size)
			}
			if c.count() != 2 || f.Calls(op) != 3 {
				t.Errorf("%d retries and %d calls of %s, want 2 and 3", c.count(), f.Calls(op), op)
			}
			if m.PendingUploads() != 0 {
				t.Errorf("PendingUploads = %d", m.PendingUploads())
			}
		})
	}
	t.Run("Abort", func(t *testing.T) {
		f, m := newFaulty(t, faulty.Config{Fail: failTimes(faulty.OpAbort, 1, faulty.ErrTransport)})
		mp := objstore.WithRetry(f, fast).(objstore.Multipart)
		u, err := mp.CreateUpload(t.Context(), "x", objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Abort(t.Context()); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		if m.PendingUploads() != 0 {
			t.Errorf("PendingUploads = %d", m.PendingUploads())
		}
	})
	t.Run("AbortUpload", func(t *testing.T) {
		f, m := newFaulty(t, faulty.Config{Fail: failTimes(faulty.OpAbortUpload, 1, faulty.ErrTransport)})
		mp := objstore.WithRetry(f, fast).(objstore.Multipart)
		u, err := mp.CreateUpload(t.Context(), "x", objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := mp.AbortUpload(t.Context(), "x", u.ID()); err != nil {
			t.Fatalf("AbortUpload: %v", err)
		}
		if m.PendingUploads() != 0 {
			t.Errorf("PendingUploads = %d", m.PendingUploads())
		}
	})
	t.Run("final error", func(t *testing.T) {
		f, _ := newFaulty(t, faulty.Config{})
		mp := objstore.WithRetry(f, fast).(objstore.Multipart)
		u, err := mp.CreateUpload(t.Context(), "x", objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := u.CopyPart(t.Context(), 1, "missing", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("CopyPart(missing) = %v, want ErrNotFound", err)
		}
		if f.Calls(faulty.OpCopyPart) != 1 {
			t.Errorf("CopyPart called %d times, want 1", f.Calls(faulty.OpCopyPart))
		}
	})
}

// plainStore hides the Multipart methods of the store it embeds.
type plainStore struct{ objstore.Store }

func TestRetryNotMultipart(t *testing.T) {
	s := objstore.WithRetry(plainStore{Store: mem.New(mem.Options{})}, fast)
	if _, ok := s.(objstore.Multipart); ok {
		t.Error("WithRetry over a plain Store implements Multipart")
	}
}

// lostAnswer creates the upload of its first CreateUpload call but
// answers with a transport error, as when the response is lost.
type lostAnswer struct {
	*mem.Store
	calls int
}

func (s *lostAnswer) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	s.calls++
	u, err := s.Store.CreateUpload(ctx, key, opts)
	if err == nil && s.calls == 1 {
		return nil, faulty.ErrTransport
	}
	return u, err
}

// TestRetryCreateUploadOrphan: an upload created by an attempt whose
// answer was lost is aborted; the caller's, and another key's, are kept.
func TestRetryCreateUploadOrphan(t *testing.T) {
	m := mem.New(mem.Options{})
	other, err := m.CreateUpload(t.Context(), "other", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &lostAnswer{Store: m}
	mp := objstore.WithRetry(s, fast).(objstore.Multipart)
	u, err := mp.CreateUpload(t.Context(), "big", objstore.PutOptions{})
	if err != nil {
		t.Fatalf("CreateUpload: %v", err)
	}
	ups, err := m.ListUploads(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].ID != u.ID() {
		t.Errorf("uploads of big = %+v, want only %s", ups, u.ID())
	}
	if ups, _ := m.ListUploads(t.Context(), "other"); len(ups) != 1 || ups[0].ID != other.ID() {
		t.Errorf("uploads of other = %+v, want %s", ups, other.ID())
	}
}
