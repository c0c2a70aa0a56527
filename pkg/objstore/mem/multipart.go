package mem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// upload is one multipart upload in progress. Its fields are guarded by the
// owning Store's mu.
type upload struct {
	s     *Store
	id    string
	key   string
	opts  objstore.PutOptions
	parts map[int][]byte
	at    time.Time // initiated
}

var _ objstore.Upload = (*upload)(nil)

// CreateUpload starts a multipart upload of key. The preconditions in opts
// are checked at Complete, as S3 does.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	if err := validKey(key); err != nil {
		return nil, s.badRequest("CreateUpload", key, "InvalidKey", err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.seq++
	u := &upload{
		s:     s,
		id:    "upload-" + strconv.FormatUint(s.seq, 10),
		key:   key,
		opts:  opts,
		parts: make(map[int][]byte),
		at:    time.Now(),
	}
	u.opts.Metadata = cloneMap(opts.Metadata)
	u.opts.Tags = cloneMap(opts.Tags)
	s.uploads[u.id] = u
	return u, nil
}

// AbortUpload forgets the upload with this ID. An unknown or finished
// upload is not an error.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if u, ok := s.uploads[uploadID]; ok && u.key == key {
		delete(s.uploads, uploadID)
	}
	return nil
}

var _ objstore.UploadLister = (*Store)(nil)

// ListUploads lists the uploads of key neither completed nor aborted, in
// the order they were created.
func (s *Store) ListUploads(ctx context.Context, key string) ([]objstore.PendingUpload, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []objstore.PendingUpload
	for _, u := range s.uploads {
		if u.key == key {
			out = append(out, objstore.PendingUpload{Key: key, ID: u.id, Initiated: u.at})
		}
	}
	slices.SortFunc(out, func(a, b objstore.PendingUpload) int { return a.Initiated.Compare(b.Initiated) })
	return out, nil
}

// PendingUploads returns the number of multipart uploads neither completed
// nor aborted.
func (s *Store) PendingUploads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uploads)
}

// ID returns the upload's ID for AbortUpload.
func (u *upload) ID() string { return u.id }

// activeLocked returns an error wrapping objstore.ErrNotFound when the
// upload was completed or aborted. u.s.mu must be held.
func (u *upload) activeLocked(op string) error {
	if _, ok := u.s.uploads[u.id]; !ok {
		return u.s.err(op, u.key, objstore.ErrNotFound, errors.New("no such upload"))
	}
	return nil
}

func (u *upload) checkPart(op string, n int, size int64) error {
	if n < 1 || n > maxParts {
		return u.s.badRequest(op, u.key, "InvalidPartNumber", fmt.Errorf("part number %d outside [1, %d]", n, maxParts))
	}
	if size < 0 || size > maxPartSize {
		return u.s.badRequest(op, u.key, "EntityTooLarge", fmt.Errorf("part size %d outside [0, %d]", size, int64(maxPartSize)))
	}
	return nil
}

// UploadPart stores part n (replacing an earlier one) from size bytes of
// src. Errors wrap objstore.ErrNotFound once the upload is finished.
func (u *upload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	if err := u.checkPart("UploadPart", n, size); err != nil {
		return err
	}
	data, err := readAll(src, size)
	if err != nil {
		return u.s.badRequest("UploadPart", u.key, "IncompleteBody", err)
	}
	if err := u.s.begin(ctx); err != nil {
		return err
	}
	defer u.s.mu.Unlock()
	if err := u.activeLocked("UploadPart"); err != nil {
		return err
	}
	u.parts[n] = data
	return nil
}

// CopyPart makes part n a copy of srcKey[off:off+length]. Errors wrap
// objstore.ErrNotFound when srcKey is missing or the upload is finished; a
// range beyond the source's end is a final 416 error.
func (u *upload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	if err := u.checkPart("CopyPart", n, length); err != nil {
		return err
	}
	if err := u.s.begin(ctx); err != nil {
		return err
	}
	defer u.s.mu.Unlock()
	if err := u.activeLocked("CopyPart"); err != nil {
		return err
	}
	o, ok := u.s.objects[srcKey]
	if !ok {
		return u.s.err("CopyPart", srcKey, objstore.ErrNotFound, nil)
	}
	if off < 0 || off+length > int64(len(o.data)) {
		return &objstore.Error{Provider: "mem", Op: "CopyPart", Bucket: u.s.opts.Bucket, Key: srcKey, Status: 416, Code: "InvalidRange",
			Err: fmt.Errorf("range [%d, %d) outside object of %d bytes", off, off+length, len(o.data))}
	}
	u.parts[n] = o.data[off : off+length : off+length]
	return nil
}

// Complete assembles the parts in part-number order into the object. It
// fails with a final 400 error when there are no parts or a non-final part
// is smaller than MinPartSize, and with objstore.ErrPrecondition when the
// PutOptions preconditions given to CreateUpload do not hold now. The
// upload stays pending after a failed Complete, so it can be aborted.
func (u *upload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	if err := u.s.begin(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer u.s.mu.Unlock()
	if err := u.activeLocked("Complete"); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if len(u.parts) == 0 {
		return objstore.ObjectInfo{}, u.s.badRequest("Complete", u.key, "MalformedXML", errors.New("no parts uploaded"))
	}
	nums := make([]int, 0, len(u.parts))
	var total int64
	for n, p := range u.parts {
		nums = append(nums, n)
		total += int64(len(p))
	}
	sort.Ints(nums)
	for _, n := range nums[:len(nums)-1] {
		if int64(len(u.parts[n])) < u.s.opts.MinPartSize {
			return objstore.ObjectInfo{}, u.s.badRequest("Complete", u.key, "EntityTooSmall",
				fmt.Errorf("part %d has %d bytes, below the minimum %d", n, len(u.parts[n]), u.s.opts.MinPartSize))
		}
	}
	if err := u.s.checkPutLocked("Complete", u.key, u.opts); err != nil {
		return objstore.ObjectInfo{}, err
	}
	data := make([]byte, 0, total)
	for _, n := range nums {
		data = append(data, u.parts[n]...)
	}
	delete(u.s.uploads, u.id)
	return u.s.storeLocked(u.key, data, u.opts.Metadata, u.opts.Tags, u.opts.ContentType), nil
}

// Abort discards the upload. Aborting a finished upload is not an error.
func (u *upload) Abort(ctx context.Context) error {
	if err := u.s.begin(ctx); err != nil {
		return err
	}
	defer u.s.mu.Unlock()
	delete(u.s.uploads, u.id)
	return nil
}
