package objstore

import (
	"context"
	"io"
	"time"
)

// CreateUpload retries the inner CreateUpload and returns an Upload whose
// methods retry too. An attempt that failed after the request was sent may
// have created an upload whose ID never came back: when there was more
// than one attempt and the inner store is an UploadLister, the uploads of
// key initiated since the first attempt (but the one returned) are
// aborted. Another client starting an upload of the same key in that
// window would see its upload aborted (an error, not a loss); without an
// UploadLister, bucket lifecycle rules clean such orphans.
func (s *retryMultipart) CreateUpload(ctx context.Context, key string, opts PutOptions) (Upload, error) {
	var u Upload
	start := time.Now()
	attempts := 0
	err := s.do(ctx, "CreateUpload", true, func(ctx context.Context) error {
		attempts++
		var err error
		u, err = s.mp.CreateUpload(ctx, key, opts)
		return err
	})
	if attempts > 1 {
		keep := ""
		if err == nil {
			keep = u.ID()
		}
		s.abortOrphans(ctx, key, start, keep)
	}
	if err != nil {
		return nil, err
	}
	return &retryUpload{s: s.retryStore, u: u}, nil
}

// orphanSkew widens the window of abortOrphans for clock skew between
// this host and the server.
const orphanSkew = 5 * time.Second

// abortOrphans aborts the uploads of key initiated since start (less
// orphanSkew) other than keep. Best effort: errors are ignored (lifecycle
// rules are the backstop).
func (s *retryMultipart) abortOrphans(ctx context.Context, key string, start time.Time, keep string) {
	l, ok := s.mp.(UploadLister)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var ups []PendingUpload
	err := s.do(ctx, "ListUploads", true, func(ctx context.Context) error {
		var err error
		ups, err = l.ListUploads(ctx, key)
		return err
	})
	if err != nil {
		return
	}
	for _, p := range ups {
		if p.ID == keep || p.Initiated.Before(start.Add(-orphanSkew)) {
			continue
		}
		_ = s.AbortUpload(ctx, key, p.ID)
	}
}

// AbortUpload retries the inner AbortUpload.
func (s *retryMultipart) AbortUpload(ctx context.Context, key, uploadID string) error {
	return s.do(ctx, "AbortUpload", true, func(ctx context.Context) error {
		return s.mp.AbortUpload(ctx, key, uploadID)
	})
}

// retryUpload retries the methods of an inner Upload. It is immutable.
type retryUpload struct {
	s *retryStore
	u Upload
}

func (u *retryUpload) ID() string { return u.u.ID() }

// UploadPart retries, re-reading src from its start each attempt.
func (u *retryUpload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	return u.s.do(ctx, "UploadPart", true, func(ctx context.Context) error {
		return u.u.UploadPart(ctx, n, src, size)
	})
}

func (u *retryUpload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	return u.s.do(ctx, "CopyPart", true, func(ctx context.Context) error {
		return u.u.CopyPart(ctx, n, srcKey, off, length)
	})
}

func (u *retryUpload) Complete(ctx context.Context) (ObjectInfo, error) {
	var info ObjectInfo
	err := u.s.do(ctx, "Complete", true, func(ctx context.Context) error {
		var err error
		info, err = u.u.Complete(ctx)
		return err
	})
	return info, err
}

func (u *retryUpload) Abort(ctx context.Context) error {
	return u.s.do(ctx, "Abort", true, func(ctx context.Context) error {
		return u.u.Abort(ctx)
	})
}
