package objstore

import (
	"context"
	"io"
)

// CreateUpload retries the inner CreateUpload and returns an Upload whose
// methods retry too. An attempt that failed ambiguously may leave an
// orphan upload behind (bucket lifecycle rules clean those).
func (s *retryMultipart) CreateUpload(ctx context.Context, key string, opts PutOptions) (Upload, error) {
	var u Upload
	err := s.do(ctx, "CreateUpload", true, func(ctx context.Context) error {
		var err error
		u, err = s.mp.CreateUpload(ctx, key, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &retryUpload{s: s.retryStore, u: u}, nil
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
