package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Copy copies src to dst on the server. It first reads the source's
// metadata (HeadObject, with If-Match for opts.IfVersion), then copies with
// one CopyObject up to 5 GiB, or with a multipart copy (UploadPartCopy)
// beyond. opts.Metadata, when non-nil, replaces the user metadata
// (MetadataDirective REPLACE), else the source's is kept; the content type,
// the other standard headers, the storage class and (for multipart copies,
// explicitly) the tags are kept either way. Errors wrap ErrNotFound (no source), ErrPrecondition
// (source version differs), ErrPermission or ErrThrottled.
func (s *Store) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket:  &s.bucket,
		Key:     &src,
		IfMatch: quoteETag(opts.IfVersion),
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", src, err)
	}
	size := aws.ToInt64(head.ContentLength)
	meta := lowerKeys(opts.Metadata)
	if opts.Metadata == nil {
		meta = lowerKeys(head.Metadata)
	}
	hdr := objectHeaders{
		contentType:        head.ContentType,
		contentEncoding:    head.ContentEncoding,
		contentDisposition: head.ContentDisposition,
		contentLanguage:    head.ContentLanguage,
		cacheControl:       head.CacheControl,
		storageClass:       types.StorageClass(head.StorageClass),
	}
	if size > s.copyThreshold {
		return s.multipartCopy(ctx, multipartCopyArgs{
			src: src, dst: dst, size: size, ifVersion: opts.IfVersion,
			metadata: meta, headers: hdr,
		})
	}

	in := &s3.CopyObjectInput{
		Bucket:               &s.bucket,
		Key:                  &dst,
		CopySource:           copySource(s.bucket, src),
		CopySourceIfMatch:    quoteETag(opts.IfVersion),
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
		StorageClass:         hdr.storageClass,
	}
	// S3 refuses to copy an object onto itself unless something changes:
	// rewriting its own metadata is such a change. REPLACE also drops the
	// standard headers, so they are sent again.
	if opts.Metadata != nil || src == dst {
		in.MetadataDirective = types.MetadataDirectiveReplace
		in.Metadata = meta
		in.ContentType = hdr.contentType
		in.ContentEncoding = hdr.contentEncoding
		in.ContentDisposition = hdr.contentDisposition
		in.ContentLanguage = hdr.contentLanguage
		in.CacheControl = hdr.cacheControl
	}
	out, err := s.client.CopyObject(ctx, in)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", dst, err)
	}
	info := objstore.ObjectInfo{Key: dst, Size: size, Metadata: meta}
	if r := out.CopyObjectResult; r != nil {
		info.Version = unquoteETag(r.ETag)
		info.ModTime = aws.ToTime(r.LastModified)
	}
	if info.ModTime.IsZero() {
		info.ModTime = responseTime(out.ResultMetadata)
	}
	return info, nil
}

// objectHeaders are the standard headers and storage class that a copy
// keeps from its source.
type objectHeaders struct {
	contentType, contentEncoding, contentDisposition *string
	contentLanguage, cacheControl                    *string
	storageClass                                     types.StorageClass
}

// multipartCopyArgs are the arguments of multipartCopy.
type multipartCopyArgs struct {
	src, dst  string
	size      int64
	ifVersion string
	metadata  map[string]string
	headers   objectHeaders
}

// multipartCopy copies an object too large for CopyObject: it creates an
// upload for dst with the source's metadata, content type and tags, copies
// the ranges in parallel and completes it (aborting on failure).
func (s *Store) multipartCopy(ctx context.Context, a multipartCopyArgs) (objstore.ObjectInfo, error) {
	tags, err := s.client.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &s.bucket, Key: &a.src})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", a.src, err)
	}
	tagMap := map[string]string{}
	for _, t := range tags.TagSet {
		tagMap[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:               &s.bucket,
		Key:                  &a.dst,
		ChecksumAlgorithm:    s.partChecksum,
		Metadata:             a.metadata,
		ContentType:          a.headers.contentType,
		ContentEncoding:      a.headers.contentEncoding,
		ContentDisposition:   a.headers.contentDisposition,
		ContentLanguage:      a.headers.contentLanguage,
		CacheControl:         a.headers.cacheControl,
		StorageClass:         a.headers.storageClass,
		Tagging:              encodeTags(tagMap),
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", a.dst, err)
	}
	uploadID := aws.ToString(created.UploadId)
	abort := func() {
		// Best effort, on a fresh context: the caller's may be done.
		_ = s.AbortUpload(context.WithoutCancel(ctx), a.dst, uploadID)
	}

	partSize := s.copyPartSize
	if partSize <= 0 {
		partSize = objstore.PartSize(caps, copyPartBase, a.size)
	}
	nparts := int((a.size + partSize - 1) / partSize)
	parts := make([]types.CompletedPart, nparts)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyConcurrency)
	for i := range nparts {
		off := int64(i) * partSize
		length := min(partSize, a.size-off)
		g.Go(func() error {
			p, err := s.copyPart(gctx, copyPartArgs{
				dst: a.dst, uploadID: uploadID, n: i + 1,
				src: a.src, off: off, length: length, ifVersion: a.ifVersion,
				checksummed: s.partChecksum != "",
			})
			if err != nil {
				return err
			}
			parts[i] = types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: p.etag, ChecksumCRC32C: p.crc32c}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		abort()
		return objstore.ObjectInfo{}, err
	}
	info, err := s.complete(ctx, completeArgs{
		op: "Copy", key: a.dst, uploadID: uploadID, parts: parts, size: a.size, metadata: a.metadata,
	})
	if err != nil {
		abort()
		return objstore.ObjectInfo{}, err
	}
	return info, nil
}
