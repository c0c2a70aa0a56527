package azure

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// ifMatch returns access conditions requiring ETag version, or nil.
func ifMatch(version string) *blob.AccessConditions {
	if version == "" {
		return nil
	}
	etag := versionETag(version)
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
}

// putConditions returns the access conditions of PutOptions, or nil.
func putConditions(opts objstore.PutOptions) *blob.AccessConditions {
	if opts.IfAbsent {
		star := azcore.ETagAny
		return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &star}}
	}
	return ifMatch(opts.IfVersion)
}

// Stat returns the blob's properties. Errors wrap objstore.ErrNotFound
// (objstore.ErrNoBucket when the container is missing).
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	return s.stat(ctx, "Stat", key, "")
}

// stat is Stat with an If-Match condition (when version is set), which
// fails with ErrPrecondition.
func (s *Store) stat(ctx context.Context, op, key, version string) (objstore.ObjectInfo, error) {
	p, err := s.cont.NewBlobClient(key).GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: ifMatch(version)})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap(op, key, objectScope, err)
	}
	return objstore.ObjectInfo{
		Key:         key,
		Size:        deref(p.ContentLength),
		ModTime:     deref(p.LastModified),
		Version:     etagVersion(p.ETag),
		Metadata:    decodeMetadata(p.Metadata),
		ContentType: deref(p.ContentType),
	}, nil
}

// NewReader reads length bytes at off (length < 0: to the end). A range at
// or past the end yields an empty reader. Errors wrap objstore.ErrNotFound,
// or objstore.ErrPrecondition when opts.IfVersion is not the current ETag.
// The reader fails with io.ErrUnexpectedEOF when the body ends early.
func (s *Store) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	if off < 0 {
		return nil, s.badRequest("NewReader", key, codeInvalidRange, fmt.Errorf("negative offset %d", off))
	}
	if length == 0 {
		return s.emptyReader(ctx, key, opts.IfVersion)
	}
	rng := blob.HTTPRange{Offset: off}
	if length > 0 {
		rng.Count = length
	}
	resp, err := s.cont.NewBlobClient(key).DownloadStream(ctx, &blob.DownloadStreamOptions{
		Range:            rng,
		AccessConditions: ifMatch(opts.IfVersion),
	})
	if err != nil {
		if isStatus(err, http.StatusRequestedRangeNotSatisfiable) {
			// Past the end, or any range of an empty blob: Azure says
			// 416, the contract says empty.
			if r, serr := s.emptyReader(ctx, key, opts.IfVersion); serr != nil || r.Info().Size <= off {
				return r, serr
			}
		}
		return nil, s.wrap("NewReader", key, objectScope, err)
	}
	info := objstore.ObjectInfo{
		Key:         key,
		Size:        totalSize(deref(resp.ContentRange), deref(resp.ContentLength)),
		ModTime:     deref(resp.LastModified),
		Version:     etagVersion(resp.ETag),
		Metadata:    decodeMetadata(resp.Metadata),
		ContentType: deref(resp.ContentType),
	}
	return objstore.NewRangeReader(resp.Body, info, off, length, func(err error) error {
		return s.wrap("Read", key, objectScope, err)
	}), nil
}

// totalSize returns the object size of a download: the total of
// "bytes a-b/total", else the body length.
func totalSize(contentRange string, contentLength int64) int64 {
	if i := strings.LastIndexByte(contentRange, '/'); i >= 0 {
		if n, err := strconv.ParseInt(contentRange[i+1:], 10, 64); err == nil {
			return n
		}
	}
	return contentLength
}

// emptyReader returns a reader of no bytes describing the current blob.
func (s *Store) emptyReader(ctx context.Context, key, version string) (objstore.Reader, error) {
	info, err := s.stat(ctx, "NewReader", key, version)
	if err != nil {
		return nil, err
	}
	return objstore.EmptyReader(info), nil
}

// Put uploads size bytes of src as one block blob (Put Blob), sending its
// MD5 so that Azure verifies the body. Errors wrap objstore.ErrPrecondition
// when opts.IfAbsent or opts.IfVersion fail, objstore.ErrNoBucket when the
// container is missing, and io.ErrUnexpectedEOF when src holds fewer than
// size bytes. Objects above MaxSinglePut need Multipart.
func (s *Store) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if size < 0 || size > MaxSinglePut {
		return objstore.ObjectInfo{}, s.badRequest("Put", key, "RequestBodyTooLarge", fmt.Errorf("size %d outside [0, %d]", size, int64(MaxSinglePut)))
	}
	sum, err := md5Sum(src, size)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Put", key, bucketScope, err)
	}
	ct := contentType(opts.ContentType)
	resp, err := s.cont.NewBlockBlobClient(key).Upload(ctx, streaming.NopCloser(io.NewSectionReader(src, 0, size)), &blockblob.UploadOptions{
		Metadata:                encodeMetadata(opts.Metadata),
		HTTPHeaders:             &blob.HTTPHeaders{BlobContentType: &ct, BlobContentMD5: sum},
		TransactionalValidation: blob.TransferValidationTypeMD5(sum),
		AccessConditions:        putConditions(opts),
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Put", key, bucketScope, err)
	}
	return objstore.ObjectInfo{
		Key:      key,
		Size:     size,
		ModTime:  deref(resp.LastModified),
		Version:  etagVersion(resp.ETag),
		Metadata: decodeMetadata(encodeMetadata(opts.Metadata)),
	}, nil
}

func contentType(ct string) string {
	if ct == "" {
		return "application/octet-stream"
	}
	return ct
}

// md5Sum returns the MD5 of src[0:size].
func md5Sum(src io.ReaderAt, size int64) ([]byte, error) {
	h := md5.New()
	n, err := io.Copy(h, io.NewSectionReader(src, 0, size))
	if err != nil {
		return nil, fmt.Errorf("azure: reading source: %w", err)
	}
	if n != size {
		return nil, fmt.Errorf("azure: source has %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	return h.Sum(nil), nil
}

// Copy copies src to dst on the server (Copy Blob, polled until done).
// With opts.Metadata set, the destination gets that metadata; a copy onto
// itself then only sets the metadata. Errors wrap objstore.ErrNotFound
// when src is missing and objstore.ErrPrecondition when opts.IfVersion is
// not src's ETag.
func (s *Store) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	if src == dst && opts.Metadata != nil {
		return s.setMetadata(ctx, "Copy", dst, opts.IfVersion, opts.Metadata)
	}
	copyOpts := &blob.StartCopyFromURLOptions{Metadata: encodeMetadata(opts.Metadata)}
	if opts.IfVersion != "" {
		etag := versionETag(opts.IfVersion)
		copyOpts.SourceModifiedAccessConditions = &blob.SourceModifiedAccessConditions{SourceIfMatch: &etag}
	}
	dstBlob := s.cont.NewBlobClient(dst)
	resp, err := dstBlob.StartCopyFromURL(ctx, s.cont.NewBlobClient(src).URL(), copyOpts)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", src, objectScope, err)
	}
	info, err := s.waitCopy(ctx, dst, deref(resp.CopyID), deref(resp.CopyStatus))
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if opts.Metadata != nil && len(opts.Metadata) == 0 && len(info.Metadata) > 0 {
		// No x-ms-meta-* headers means "keep the source's": clear them.
		return s.setMetadata(ctx, "Copy", dst, info.Version, nil)
	}
	return info, nil
}

// Copy polling backoff.
const (
	copyPollMin = 20 * time.Millisecond
	copyPollMax = 2 * time.Second
)

// waitCopy polls dst until the copy with id is no longer pending and
// returns dst's info.
func (s *Store) waitCopy(ctx context.Context, dst, id string, status blob.CopyStatusType) (objstore.ObjectInfo, error) {
	delay := copyPollMin
	for {
		p, err := s.cont.NewBlobClient(dst).GetProperties(ctx, nil)
		if err != nil {
			return objstore.ObjectInfo{}, s.wrap("Copy", dst, objectScope, err)
		}
		if p.CopyID != nil && id != "" && *p.CopyID != id {
			return objstore.ObjectInfo{}, s.wrap("Copy", dst, objectScope, errors.New("azure: another copy replaced the destination"))
		}
		status = deref(p.CopyStatus)
		if status == "" || status == blob.CopyStatusTypeSuccess {
			return objstore.ObjectInfo{
				Key:      dst,
				Size:     deref(p.ContentLength),
				ModTime:  deref(p.LastModified),
				Version:  etagVersion(p.ETag),
				Metadata: decodeMetadata(p.Metadata),
			}, nil
		}
		if status != blob.CopyStatusTypePending {
			return objstore.ObjectInfo{}, s.wrap("Copy", dst, objectScope,
				fmt.Errorf("azure: copy %s: %s", status, deref(p.CopyStatusDescription)))
		}
		select {
		case <-ctx.Done():
			return objstore.ObjectInfo{}, s.wrap("Copy", dst, objectScope, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, copyPollMax)
	}
}

// setMetadata replaces key's metadata (If-Match version when set) and
// returns its new info.
func (s *Store) setMetadata(ctx context.Context, op, key, version string, meta map[string]string) (objstore.ObjectInfo, error) {
	info, err := s.stat(ctx, op, key, version)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	resp, err := s.cont.NewBlobClient(key).SetMetadata(ctx, encodeMetadata(meta), &blob.SetMetadataOptions{
		AccessConditions: ifMatch(info.Version), // the content we described
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap(op, key, objectScope, err)
	}
	info.Version = etagVersion(resp.ETag)
	info.ModTime = deref(resp.LastModified)
	info.Metadata = decodeMetadata(encodeMetadata(meta))
	return info, nil
}

// Delete removes key (and its snapshots). A missing key is not an error,
// unless opts.IfVersion is set: then, as when the ETag differs, the error
// wraps objstore.ErrPrecondition.
func (s *Store) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	include := blob.DeleteSnapshotsOptionTypeInclude
	_, err := s.cont.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{
		DeleteSnapshots:  &include,
		AccessConditions: ifMatch(opts.IfVersion),
	})
	return objstore.DeleteErr(s.wrap("Delete", key, objectScope, err), opts.IfVersion, errors.New("azure: the blob does not exist"))
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// etagVersion turns an ETag into a Version: without quotes, so that the
// same blob has the same Version whether it comes from a listing (which
// Azure sends unquoted) or from a HEAD or GET (quoted).
func etagVersion(p *azcore.ETag) string {
	return strings.Trim(string(deref(p)), `"`)
}

// versionETag turns a Version back into a quoted ETag for If-Match.
func versionETag(v string) azcore.ETag {
	return azcore.ETag(`"` + strings.Trim(v, `"`) + `"`)
}
