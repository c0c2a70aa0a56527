package faulty

import (
	"context"
	"fmt"
	"io"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// CreateUpload is the inner CreateUpload, with faults. It fails with an
// error wrapping objstore.ErrUnsupported when the inner store is not an
// objstore.Multipart.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	mp, ok := s.inner.(objstore.Multipart)
	if !ok {
		return nil, fmt.Errorf("faulty: inner store has no multipart uploads: %w", objstore.ErrUnsupported)
	}
	if err := s.inject(ctx, OpCreateUpload, key); err != nil {
		return nil, err
	}
	u, err := mp.CreateUpload(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &upload{s: s, key: key, u: u}, nil
}

// AbortUpload is the inner AbortUpload, with faults; see CreateUpload.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	mp, ok := s.inner.(objstore.Multipart)
	if !ok {
		return fmt.Errorf("faulty: inner store has no multipart uploads: %w", objstore.ErrUnsupported)
	}
	if err := s.inject(ctx, OpAbortUpload, key); err != nil {
		return err
	}
	return mp.AbortUpload(ctx, key, uploadID)
}

// upload is an inner Upload with faults.
type upload struct {
	s   *Store
	key string
	u   objstore.Upload
}

func (u *upload) ID() string { return u.u.ID() }

func (u *upload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	if err := u.s.inject(ctx, OpUploadPart, u.key); err != nil {
		return err
	}
	return u.u.UploadPart(ctx, n, src, size)
}

func (u *upload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	if err := u.s.inject(ctx, OpCopyPart, u.key); err != nil {
		return err
	}
	return u.u.CopyPart(ctx, n, srcKey, off, length)
}

func (u *upload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	if err := u.s.inject(ctx, OpComplete, u.key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return u.u.Complete(ctx)
}

func (u *upload) Abort(ctx context.Context) error {
	if err := u.s.inject(ctx, OpAbort, u.key); err != nil {
		return err
	}
	return u.u.Abort(ctx)
}
