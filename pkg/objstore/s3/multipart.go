package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// CreateUpload starts a multipart upload of key (CreateMultipartUpload with
// the metadata, tags, content type, the store's server-side encryption and,
// with Config.MultipartChecksums, CRC32C part checksums). opts.IfAbsent and opts.IfVersion are checked
// when the upload completes (If-None-Match / If-Match on
// CompleteMultipartUpload).
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	sum := s.streamChecksum
	if opts.CopyParts {
		sum = s.partChecksum
	}
	in := &s3.CreateMultipartUploadInput{
		Bucket:               &s.bucket,
		Key:                  &key,
		ChecksumAlgorithm:    sum,
		Metadata:             lowerKeys(opts.Metadata),
		Tagging:              encodeTags(opts.Tags),
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
	}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	out, err := s.client.CreateMultipartUpload(ctx, in)
	if err != nil {
		return nil, s.wrap("CreateUpload", key, err)
	}
	return &upload{
		s:         s,
		key:       key,
		id:        aws.ToString(out.UploadId),
		checksum:  sum,
		ifAbsent:  opts.IfAbsent,
		ifVersion: opts.IfVersion,
		metadata:  lowerKeys(opts.Metadata),
		parts:     map[int32]part{},
	}, nil
}

// AbortUpload aborts the upload uploadID of key. An unknown or finished
// upload is not an error.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   &s.bucket,
		Key:      &key,
		UploadId: &uploadID,
	})
	if err == nil {
		return nil
	}
	err = s.wrap("AbortUpload", key, err)
	if errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrNoBucket) {
		return nil // NoSuchUpload
	}
	return err
}

// upload is one multipart upload in progress.
type upload struct {
	s         *Store
	key       string
	id        string
	ifAbsent  bool
	ifVersion string
	metadata  map[string]string
	checksum  types.ChecksumAlgorithm // of every part ("" for none)

	// mu guards parts, the parts uploaded so far by number.
	mu    sync.Mutex
	parts map[int32]part
}

// part is one uploaded part, as CompleteMultipartUpload needs it.
type part struct {
	etag   *string
	crc32c *string
	size   int64
}

func (u *upload) ID() string { return u.id }

// checkPart validates a part number and size before a request is made.
func (u *upload) checkPart(op string, n int, size int64) error {
	if n < 1 || n > maxParts {
		return u.s.invalid(op, u.key, fmt.Errorf("part number %d is outside 1..%d", n, maxParts))
	}
	if size < 0 || size > maxPartSize {
		return u.s.invalid(op, u.key, fmt.Errorf("part size %d is outside 0..%d", size, int64(maxPartSize)))
	}
	return nil
}

// UploadPart uploads part n (UploadPart, with a CRC32C checksum when the
// store uses multipart checksums); uploading a
// number again replaces the part. Errors wrap ErrNotFound when the upload
// is gone.
func (u *upload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	if err := u.checkPart("UploadPart", n, size); err != nil {
		return err
	}
	in := &s3.UploadPartInput{
		Bucket:            &u.s.bucket,
		Key:               &u.key,
		UploadId:          &u.id,
		PartNumber:        aws.Int32(int32(n)),
		Body:              io.NewSectionReader(src, 0, size),
		ContentLength:     aws.Int64(size),
		ChecksumAlgorithm: u.checksum,
	}
	if u.checksum == types.ChecksumAlgorithmCrc32c {
		var err error
		if ctx, in.Body, in.ChecksumCRC32C, err = u.s.checksummedBody(ctx, src, size); err != nil {
			return u.s.wrap("UploadPart", u.key, err)
		}
	}
	out, err := u.s.client.UploadPart(ctx, in, func(o *s3.Options) {
		if u.checksum != "" {
			u.s.unsignedPayload(o)
		}
	})
	if err != nil {
		return u.s.wrap("UploadPart", u.key, err)
	}
	u.setPart(n, part{etag: out.ETag, crc32c: out.ChecksumCRC32C, size: size})
	return nil
}

// CopyPart makes part n a server-side copy of srcKey[off:off+length]
// (UploadPartCopy with a source range). A missing source wraps ErrNotFound.
func (u *upload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	if err := u.checkPart("CopyPart", n, length); err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return u.s.invalid("CopyPart", u.key, fmt.Errorf("copy range off %d length %d is empty or negative", off, length))
	}
	p, err := u.s.copyPart(ctx, copyPartArgs{
		dst: u.key, uploadID: u.id, n: n, src: srcKey, off: off, length: length,
		checksummed: u.checksum != "",
	})
	if err != nil {
		return err
	}
	u.setPart(n, p)
	return nil
}

func (u *upload) setPart(n int, p part) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.parts[int32(n)] = p
}

// Complete assembles the parts in number order (CompleteMultipartUpload
// with each part's checksum and the upload's preconditions). A failed
// precondition wraps ErrPrecondition; the upload then stays open for Abort.
func (u *upload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	u.mu.Lock()
	parts := make([]types.CompletedPart, 0, len(u.parts))
	var size int64
	for n, p := range u.parts {
		parts = append(parts, types.CompletedPart{
			PartNumber:     aws.Int32(n),
			ETag:           p.etag,
			ChecksumCRC32C: p.crc32c,
		})
		size += p.size
	}
	u.mu.Unlock()
	sort.Slice(parts, func(i, j int) bool { return *parts[i].PartNumber < *parts[j].PartNumber })
	return u.s.complete(ctx, completeArgs{
		op: "Complete", key: u.key, uploadID: u.id, parts: parts, size: size,
		ifAbsent: u.ifAbsent, ifVersion: u.ifVersion, metadata: u.metadata,
	})
}

// Abort aborts the upload; an upload already gone is not an error.
func (u *upload) Abort(ctx context.Context) error {
	return u.s.AbortUpload(ctx, u.key, u.id)
}

// completeArgs are the arguments of complete.
type completeArgs struct {
	op, key, uploadID string
	parts             []types.CompletedPart
	size              int64
	ifAbsent          bool
	ifVersion         string
	metadata          map[string]string
}

// complete sends CompleteMultipartUpload and describes the new object.
func (s *Store) complete(ctx context.Context, a completeArgs) (objstore.ObjectInfo, error) {
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             &a.key,
		UploadId:        &a.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: a.parts},
		IfMatch:         quoteETag(a.ifVersion),
	}
	if a.ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.CompleteMultipartUpload(ctx, in)
	if err != nil {
		err = s.wrap(a.op, a.key, err)
		var e *objstore.Error
		if a.ifVersion != "" && errors.As(err, &e) && e.Code != "NoSuchUpload" {
			err = missingIsPrecondition(err)
		}
		return objstore.ObjectInfo{}, err
	}
	return objstore.ObjectInfo{
		Key:      a.key,
		Size:     a.size,
		ModTime:  responseTime(out.ResultMetadata),
		Version:  unquoteETag(out.ETag),
		Metadata: a.metadata,
	}, nil
}

// copyPartArgs are the arguments of copyPart.
type copyPartArgs struct {
	dst, uploadID string
	n             int
	src           string
	off, length   int64
	ifVersion     string // of the source
	checksummed   bool   // the upload has part checksums
}

// copyPart sends one UploadPartCopy.
func (s *Store) copyPart(ctx context.Context, a copyPartArgs) (part, error) {
	out, err := s.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{
		Bucket:            &s.bucket,
		Key:               &a.dst,
		UploadId:          &a.uploadID,
		PartNumber:        aws.Int32(int32(a.n)),
		CopySource:        copySource(s.bucket, a.src),
		CopySourceRange:   aws.String(httpRange(a.off, a.length)),
		CopySourceIfMatch: quoteETag(a.ifVersion),
	})
	if err != nil {
		err = s.wrap("CopyPart", a.src, err)
		var e *objstore.Error
		var ae smithy.APIError
		if a.checksummed && errors.As(err, &e) && e.Code == "InvalidArgument" &&
			errors.As(err, &ae) && strings.Contains(strings.ToLower(ae.ErrorMessage()), "checksum") {
			// MinIO cannot compute the checksum of a copied part.
			e.Kind = objstore.ErrUnsupported
			e.Err = fmt.Errorf("the server cannot copy parts into a checksummed upload (set MultipartChecksums off): %w", e.Err)
		}
		return part{}, err
	}
	p := part{size: a.length}
	if r := out.CopyPartResult; r != nil {
		p.etag, p.crc32c = r.ETag, r.ChecksumCRC32C
	}
	return p, nil
}
