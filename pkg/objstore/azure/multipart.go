package azure

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// A multipart upload stages blocks on the destination blob and commits
// them in part order. Block IDs are base64("<upload ID>-<suffix>") with a
// 16-hex-digit upload ID and a 5-character suffix, so all have one length
// (Azure requires it per blob):
//
//   - "00000": a 1-byte marker staged by CreateUpload, never committed;
//   - "00001"…"50000": part n;
//   - "abort": staged by Abort and AbortUpload; Complete refuses an
//     upload that has it.
//
// Uncommitted blocks cannot be deleted: Azure drops them when the blob is
// next committed (by any writer) or after a week. Abort therefore only
// marks the upload aborted. A commit of the blob by another writer while
// an upload is in progress discards the upload's blocks: its Complete then
// fails with ErrNotFound.
const (
	markerSuffix  = "00000"
	abortSuffix   = "abort"
	sasLifetime   = time.Hour // of the source URL of CopyPart
	maxClientCopy = 256 << 20 // largest CopyPart done through the client
)

func blockID(id, suffix string) string {
	return base64.StdEncoding.EncodeToString([]byte(id + "-" + suffix))
}

func partSuffix(n int) string { return fmt.Sprintf("%05d", n) }

// upload is one block-list upload.
type upload struct {
	s     *Store
	key   string
	id    string
	opts  objstore.PutOptions
	parts objstore.UploadParts[int64] // part number → size (0: no block, skipped)
}

var _ objstore.Upload = (*upload)(nil)

// CreateUpload starts a multipart upload of key by staging its marker
// block. The preconditions in opts are checked by Complete's commit.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	id, err := objstore.NewUploadID()
	if err != nil {
		return nil, err
	}
	u := &upload{s: s, key: key, id: id, opts: opts}
	u.opts.Metadata = decodeMetadata(encodeMetadata(opts.Metadata))
	if err := s.stageBytes(ctx, "CreateUpload", key, blockID(u.id, markerSuffix), []byte{'m'}); err != nil {
		return nil, err
	}
	return u, nil
}

// stageBytes stages a small block with its MD5.
func (s *Store) stageBytes(ctx context.Context, op, key, id string, data []byte) error {
	sum := md5.Sum(data)
	_, err := s.cont.NewBlockBlobClient(key).StageBlock(ctx, id, streaming.NopCloser(bytes.NewReader(data)),
		&blockblob.StageBlockOptions{TransactionalValidation: blob.TransferValidationTypeMD5(sum[:])})
	return s.wrap(op, key, bucketScope, err)
}

// AbortUpload marks upload uploadID of key aborted, so that no Complete
// commits it; its blocks expire on the service. An unknown or finished
// upload is not an error.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	if !objstore.ValidUploadID(uploadID) {
		return nil
	}
	blocks, err := s.uncommitted(ctx, "AbortUpload", key)
	if err != nil || !blocks[blockID(uploadID, markerSuffix)] || blocks[blockID(uploadID, abortSuffix)] {
		return err // unknown, committed (blocks gone) or already aborted
	}
	return s.stageBytes(ctx, "AbortUpload", key, blockID(uploadID, abortSuffix), []byte{'a'})
}

// uncommitted returns the IDs of key's uncommitted blocks (none when the
// blob does not exist).
func (s *Store) uncommitted(ctx context.Context, op, key string) (map[string]bool, error) {
	resp, err := s.cont.NewBlockBlobClient(key).GetBlockList(ctx, blockblob.BlockListTypeUncommitted, nil)
	if err != nil {
		werr := s.wrap(op, key, objectScope, err)
		if errors.Is(werr, objstore.ErrNotFound) && !errors.Is(werr, objstore.ErrNoBucket) {
			return nil, nil
		}
		return nil, werr
	}
	ids := make(map[string]bool, len(resp.UncommittedBlocks))
	for _, b := range resp.UncommittedBlocks {
		if b != nil && b.Name != nil {
			ids[*b.Name] = true
		}
	}
	return ids, nil
}

// ID returns the upload ID for AbortUpload.
func (u *upload) ID() string { return u.id }

// finished returns an error wrapping objstore.ErrNotFound when the upload
// is completed or aborted (state is not active).
func (u *upload) finished(op string, state objstore.UploadState) error {
	if state == objstore.UploadActive {
		return nil
	}
	return u.notFound(op, fmt.Errorf("azure: upload %s was %s", u.id, state))
}

func (u *upload) notFound(op string, cause error) error {
	return &objstore.Error{Provider: "az", Op: op, Bucket: u.s.cfg.Container, Key: u.key,
		Status: http.StatusNotFound, Kind: objstore.ErrNotFound, Err: cause}
}

func (u *upload) check(op string, n int, size int64) error {
	if n < 1 || n > MaxBlocks {
		return u.s.badRequest(op, u.key, "InvalidBlockId", fmt.Errorf("part number %d outside [1, %d]", n, MaxBlocks))
	}
	if size < 0 || size > MaxBlockSize {
		return u.s.badRequest(op, u.key, "RequestBodyTooLarge", fmt.Errorf("part size %d outside [0, %d]", size, int64(MaxBlockSize)))
	}
	return u.finished(op, u.parts.State())
}

// UploadPart stages part n as a block with its MD5 (replacing an earlier
// part n). Errors wrap objstore.ErrNotFound once the upload is finished.
func (u *upload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	if err := u.check("UploadPart", n, size); err != nil {
		return err
	}
	if size > 0 {
		sum, err := md5Sum(src, size)
		if err != nil {
			return u.s.wrap("UploadPart", u.key, bucketScope, err)
		}
		_, err = u.s.cont.NewBlockBlobClient(u.key).StageBlock(ctx, blockID(u.id, partSuffix(n)),
			streaming.NopCloser(io.NewSectionReader(src, 0, size)),
			&blockblob.StageBlockOptions{TransactionalValidation: blob.TransferValidationTypeMD5(sum)})
		if err != nil {
			return u.s.wrap("UploadPart", u.key, bucketScope, err)
		}
	}
	u.parts.Set(n, size)
	return nil
}

// CopyPart stages part n as a server-side copy of srcKey[off:off+length]
// (Put Block From URL, the source authorized by a short-lived SAS). It
// needs a shared key: otherwise the error wraps objstore.ErrUnsupported.
// Errors wrap objstore.ErrNotFound when srcKey is missing.
func (u *upload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	if !u.s.sharedKey {
		return &objstore.Error{Provider: "az", Op: "CopyPart", Bucket: u.s.cfg.Container, Key: srcKey,
			Kind: objstore.ErrUnsupported, Err: errors.New("azure: CopyPart needs a shared key to sign the source URL")}
	}
	if off < 0 {
		return u.s.badRequest("CopyPart", srcKey, codeInvalidRange, fmt.Errorf("negative offset %d", off))
	}
	if err := u.check("CopyPart", n, length); err != nil {
		return err
	}
	if length > 0 {
		if err := u.copyBlock(ctx, blockID(u.id, partSuffix(n)), srcKey, off, length); err != nil {
			return err
		}
	}
	u.parts.Set(n, length)
	return nil
}

// copyBlock stages block id as a copy of srcKey[off:off+length] with Put
// Block From URL. A service without it (Azurite answers 501) gets the
// bytes through the client instead, for parts up to maxClientCopy.
func (u *upload) copyBlock(ctx context.Context, id, srcKey string, off, length int64) error {
	if !u.s.noBlockFromURL.Load() {
		srcURL, err := u.s.cont.NewBlobClient(srcKey).GetSASURL(sas.BlobPermissions{Read: true}, time.Now().Add(sasLifetime), nil)
		if err != nil {
			return u.s.wrap("CopyPart", srcKey, objectScope, err)
		}
		_, err = u.s.cont.NewBlockBlobClient(u.key).StageBlockFromURL(ctx, id, srcURL,
			&blockblob.StageBlockFromURLOptions{Range: blob.HTTPRange{Offset: off, Count: length}})
		if !isStatus(err, http.StatusNotImplemented) {
			return u.s.wrap("CopyPart", srcKey, objectScope, err)
		}
		u.s.noBlockFromURL.Store(true)
	}
	if length > maxClientCopy {
		return &objstore.Error{Provider: "az", Op: "CopyPart", Bucket: u.s.cfg.Container, Key: srcKey, Kind: objstore.ErrUnsupported,
			Err: fmt.Errorf("azure: the service lacks Put Block From URL and %d bytes is too much to copy through the client", length)}
	}
	r, err := u.s.NewReader(ctx, srcKey, off, length, objstore.ReadOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	data := make([]byte, length)
	if _, err := io.ReadFull(r, data); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &objstore.Error{Provider: "az", Op: "CopyPart", Bucket: u.s.cfg.Container, Key: srcKey,
				Status: http.StatusRequestedRangeNotSatisfiable, Code: codeInvalidRange,
				Err: fmt.Errorf("azure: range [%d, %d) is outside the source", off, off+length)}
		}
		return err
	}
	return u.s.stageBytes(ctx, "CopyPart", u.key, id, data)
}

// Complete commits the parts' blocks in part-number order. Errors wrap
// objstore.ErrPrecondition when the PutOptions preconditions fail (the
// upload then stays pending, to be aborted), and objstore.ErrNotFound when
// the upload was aborted, completed, or its blocks were discarded by
// another writer's commit.
func (u *upload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	state, nums, sizes := u.parts.Parts()
	if err := u.finished("Complete", state); err != nil {
		return objstore.ObjectInfo{}, err
	}
	var total int64
	for _, size := range sizes {
		total += size
	}
	if len(nums) == 0 {
		return objstore.ObjectInfo{}, u.s.badRequest("Complete", u.key, "InvalidBlockList", errors.New("azure: no parts uploaded"))
	}
	staged, err := u.s.uncommitted(ctx, "Complete", u.key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if staged[blockID(u.id, abortSuffix)] {
		return objstore.ObjectInfo{}, u.notFound("Complete", fmt.Errorf("azure: upload %s was aborted", u.id))
	}
	ids := make([]string, 0, len(nums))
	for _, n := range nums {
		if sizes[n] == 0 {
			continue
		}
		id := blockID(u.id, partSuffix(n))
		if !staged[id] {
			return objstore.ObjectInfo{}, u.notFound("Complete",
				fmt.Errorf("azure: part %d of upload %s is gone (the blob was committed by another writer?)", n, u.id))
		}
		ids = append(ids, id)
	}
	ct := contentType(u.opts.ContentType)
	resp, err := u.s.cont.NewBlockBlobClient(u.key).CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{
		Metadata:         encodeMetadata(u.opts.Metadata),
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: &ct},
		AccessConditions: putConditions(u.opts),
	})
	if err != nil {
		return objstore.ObjectInfo{}, u.s.wrap("Complete", u.key, objectScope, err)
	}
	u.parts.Finish(objstore.UploadCompleted)
	return objstore.ObjectInfo{
		Key:      u.key,
		Size:     total,
		ModTime:  deref(resp.LastModified),
		Version:  etagVersion(resp.ETag),
		Metadata: u.opts.Metadata,
	}, nil
}

// Abort marks the upload aborted on the service (an "abort" block), so
// nothing commits it; the blocks expire there. Aborting a finished upload
// is not an error.
func (u *upload) Abort(ctx context.Context) error {
	if prev := u.parts.Finish(objstore.UploadAborted); prev != objstore.UploadActive {
		return nil
	}
	return u.s.stageBytes(ctx, "Abort", u.key, blockID(u.id, abortSuffix), []byte{'a'})
}
