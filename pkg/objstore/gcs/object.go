package gcs

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)

// Stat returns the object's attributes. Errors wrap objstore.ErrNotFound
// (objstore.ErrNoBucket when GCS says the bucket is missing).
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	a, err := s.bkt.Object(key).Attrs(ctx)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Stat", key, objectScope, err)
	}
	return info(a), nil
}

// statIf is Stat that also fails with ErrPrecondition unless the object's
// generation is version (when version is set).
func (s *Store) statIf(ctx context.Context, op, key, version string) (*storage.ObjectAttrs, error) {
	h := s.bkt.Object(key)
	if version != "" {
		gen, ok := parseVersion(version)
		if !ok {
			return nil, s.preconditionErr(op, key, fmt.Errorf("version %q is no generation", version))
		}
		h = h.If(storage.Conditions{GenerationMatch: gen})
	}
	a, err := h.Attrs(ctx)
	if err != nil {
		return nil, s.wrap(op, key, objectScope, err)
	}
	if version != "" && formatVersion(a.Generation) != version {
		return nil, s.preconditionErr(op, key, fmt.Errorf("generation is %d, not %s", a.Generation, version))
	}
	return a, nil
}

// NewReader reads length bytes at off (length < 0: to the end). A range at
// or past the end yields an empty reader. Errors wrap objstore.ErrNotFound,
// or objstore.ErrPrecondition when opts.IfVersion is not the current
// generation. The reader fails with io.ErrUnexpectedEOF when the body ends
// early.
func (s *Store) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	if off < 0 {
		return nil, s.badRequest("NewReader", key, "InvalidRange", fmt.Errorf("negative offset %d", off))
	}
	h := s.bkt.Object(key)
	if opts.IfVersion != "" {
		gen, ok := parseVersion(opts.IfVersion)
		if !ok {
			return nil, s.preconditionErr("NewReader", key, fmt.Errorf("version %q is no generation", opts.IfVersion))
		}
		h = h.If(storage.Conditions{GenerationMatch: gen})
	}
	if length == 0 {
		return s.emptyReader(ctx, key, opts.IfVersion)
	}
	r, err := h.NewRangeReader(ctx, off, length)
	if err != nil {
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusRequestedRangeNotSatisfiable {
			// Past the end (or any range of an empty object): GCS says
			// 416, the contract says empty.
			a, serr := s.statIf(ctx, "NewReader", key, opts.IfVersion)
			if serr != nil {
				return nil, serr
			}
			if a.Size <= off {
				return objstore.EmptyReader(info(a)), nil
			}
		}
		return nil, s.wrap("NewReader", key, objectScope, err)
	}
	ri := readerInfo(key, r)
	// The response names the generation it serves: checking it is exact,
	// and it covers fake-gcs-server, which ignores ifGenerationMatch.
	if opts.IfVersion != "" && ri.Version != opts.IfVersion {
		r.Close()
		return nil, s.preconditionErr("NewReader", key, fmt.Errorf("generation is %s, not %s", ri.Version, opts.IfVersion))
	}
	return objstore.NewRangeReader(r, ri, off, length, func(err error) error {
		return s.wrap("Read", key, objectScope, err)
	}), nil
}

// emptyReader returns a reader of no bytes describing the current object.
func (s *Store) emptyReader(ctx context.Context, key, version string) (objstore.Reader, error) {
	a, err := s.statIf(ctx, "NewReader", key, version)
	if err != nil {
		return nil, err
	}
	return objstore.EmptyReader(info(a)), nil
}

// readerInfo describes the object version a range reader serves.
func readerInfo(key string, r *storage.Reader) objstore.ObjectInfo {
	return objstore.ObjectInfo{
		Key:         key,
		Size:        r.Attrs.Size,
		ModTime:     r.Attrs.LastModified,
		Version:     formatVersion(r.Attrs.Generation),
		Metadata:    lowerKeys(r.Metadata()),
		ContentType: r.Attrs.ContentType,
	}
}

// Put uploads size bytes of src as key, with its CRC32C checked by GCS.
// Objects below Config.ChunkSize go in one request, larger ones as a
// resumable upload whose chunks the SDK resends on transient errors. Errors wrap objstore.ErrPrecondition when opts.IfAbsent
// or opts.IfVersion fail, objstore.ErrNoBucket when the bucket is missing,
// and io.ErrUnexpectedEOF when src holds fewer than size bytes.
func (s *Store) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	var conds storage.Conditions
	switch {
	case opts.IfAbsent:
		conds.DoesNotExist = true
	case opts.IfVersion != "":
		gen, ok := parseVersion(opts.IfVersion)
		if !ok {
			return objstore.ObjectInfo{}, s.preconditionErr("Put", key, fmt.Errorf("version %q is no generation", opts.IfVersion))
		}
		conds.GenerationMatch = gen
	}
	a, err := s.upload(ctx, "Put", key, src, size, conds, opts.ContentType, opts.Metadata)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return info(a), nil
}

// upload writes one object from src, sending its CRC32C.
func (s *Store) upload(ctx context.Context, op, key string, src io.ReaderAt, size int64,
	conds storage.Conditions, contentType string, meta map[string]string) (*storage.ObjectAttrs, error) {
	if size < 0 || size > MaxObjectSize {
		return nil, s.badRequest(op, key, "InvalidSize", fmt.Errorf("size %d outside [0, %d]", size, int64(MaxObjectSize)))
	}
	crc, err := checksum(src, size)
	if err != nil {
		return nil, s.wrap(op, key, bucketScope, err)
	}
	h := s.bkt.Object(key)
	if conds != (storage.Conditions{}) {
		h = h.If(conds)
	}
	if size >= int64(s.cfg.ChunkSize) {
		// A resumable upload: let the SDK resend a failed chunk rather
		// than have objstore.WithRetry restart the whole object.
		h = h.Retryer(storage.WithPolicy(storage.RetryAlways), storage.WithMaxAttempts(chunkAttempts))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := h.NewWriter(wctx)
	w.ContentType = contentType
	if w.ContentType == "" {
		w.ContentType = "application/octet-stream"
	}
	w.Metadata = lowerKeys(meta)
	w.CRC32C = crc
	w.SendCRC32C = true
	w.DisableAutoChecksum = true // we send our own
	w.ChunkSize = s.chunkSize(size)
	n, err := io.Copy(w, io.NewSectionReader(src, 0, size))
	if err == nil && n != size {
		err = fmt.Errorf("gcs: source of %s has %d bytes, want %d: %w", key, n, size, io.ErrUnexpectedEOF)
	}
	if err != nil {
		cancel() // abandons the upload: no object is created
		_ = w.Close()
		return nil, s.wrap(op, key, bucketScope, err)
	}
	if err := w.Close(); err != nil {
		return nil, s.wrap(op, key, bucketScope, err)
	}
	return w.Attrs(), nil
}

// chunkSize returns a Writer.ChunkSize that sends objects up to
// Config.ChunkSize in one request: just above size, 256 KiB aligned.
func (s *Store) chunkSize(size int64) int {
	if size >= int64(s.cfg.ChunkSize) {
		return s.cfg.ChunkSize
	}
	return roundUp(int(size)+1, chunkAlign)
}

// checksum returns the CRC32C of src[0:size].
func checksum(src io.ReaderAt, size int64) (uint32, error) {
	h := crc32.New(crc32cTable)
	n, err := io.Copy(h, io.NewSectionReader(src, 0, size))
	if err != nil {
		return 0, fmt.Errorf("gcs: reading source: %w", err)
	}
	if n != size {
		return 0, fmt.Errorf("gcs: source has %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	return h.Sum32(), nil
}

// Copy copies src to dst on the server (a rewrite, looped until done).
// With opts.Metadata set, the destination gets that metadata and keeps the
// source's content type. Errors wrap objstore.ErrNotFound when src is
// missing and objstore.ErrPrecondition when opts.IfVersion is not src's
// generation.
func (s *Store) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	srcH := s.bkt.Object(src)
	var srcAttrs *storage.ObjectAttrs
	if opts.Metadata != nil || (s.cfg.Emulator && opts.IfVersion != "") {
		a, err := s.statIf(ctx, "Copy", src, opts.IfVersion)
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		srcAttrs = a
	}
	if opts.IfVersion != "" {
		gen, ok := parseVersion(opts.IfVersion)
		if !ok {
			return objstore.ObjectInfo{}, s.preconditionErr("Copy", src, fmt.Errorf("version %q is no generation", opts.IfVersion))
		}
		srcH = srcH.If(storage.Conditions{GenerationMatch: gen})
	}
	c := s.bkt.Object(dst).CopierFrom(srcH)
	if opts.Metadata != nil {
		c.ContentType = srcAttrs.ContentType
		c.ContentEncoding = srcAttrs.ContentEncoding
		c.ContentDisposition = srcAttrs.ContentDisposition
		c.ContentLanguage = srcAttrs.ContentLanguage
		c.CacheControl = srcAttrs.CacheControl
		c.Metadata = lowerKeys(opts.Metadata)
		if c.Metadata == nil {
			c.Metadata = map[string]string{}
		}
	}
	a, err := c.Run(ctx)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Copy", src, objectScope, err)
	}
	return info(a), nil
}

// Delete removes key. A missing key is not an error, unless opts.IfVersion
// is set: then, as when the generation differs, the error wraps
// objstore.ErrPrecondition.
func (s *Store) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	h := s.bkt.Object(key)
	if opts.IfVersion != "" {
		gen, ok := parseVersion(opts.IfVersion)
		if !ok {
			return s.preconditionErr("Delete", key, fmt.Errorf("version %q is no generation", opts.IfVersion))
		}
		if s.cfg.Emulator { // fake-gcs-server ignores ifGenerationMatch on delete
			if _, err := s.statIf(ctx, "Delete", key, opts.IfVersion); err != nil {
				if errors.Is(err, objstore.ErrNotFound) {
					return missingAsPrecondition(err)
				}
				return err
			}
		}
		h = h.If(storage.Conditions{GenerationMatch: gen})
	}
	return objstore.DeleteErr(s.wrap("Delete", key, objectScope, h.Delete(ctx)), opts.IfVersion, errMissing)
}
