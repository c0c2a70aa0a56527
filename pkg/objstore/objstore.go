package objstore

import (
	"context"
	"io"
	"time"
)

// Store is one bucket (or container) of one backend. Keys are the object
// names inside it, without a leading slash. All methods are safe for
// concurrent use.
type Store interface {
	// Stat returns the object's metadata, or an error wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// NewReader reads length bytes starting at off; length < 0 reads to the
	// end. A range that starts at or past the end of a non-empty object
	// returns a reader that yields io.EOF at once (never an error), as does
	// any range of an empty object. The reader must fail (not return a short
	// io.EOF) when the body is cut before the promised length.
	NewReader(ctx context.Context, key string, off, length int64, opts ReadOptions) (Reader, error)
	// List returns one page of keys in lexical order. With Delimiter "/",
	// keys below the next "/" after Prefix fold into Prefixes. Objects
	// carry their user metadata when Caps().ListMetadata.
	List(ctx context.Context, opts ListOptions) (ListPage, error)
	// Put uploads size bytes from src as one object.
	Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts PutOptions) (ObjectInfo, error)
	// Copy copies src to dst on the server side.
	Copy(ctx context.Context, src, dst string, opts CopyOptions) (ObjectInfo, error)
	// Delete removes key. Deleting a missing key is not an error unless
	// opts.IfVersion is set.
	Delete(ctx context.Context, key string, opts DeleteOptions) error
	// Caps describes the backend's limits and features.
	Caps() Caps
	// Close releases the store's resources.
	Close() error
}

// Multipart is implemented by stores that can upload one object in parts,
// in parallel and out of order, and assemble it on Complete.
type Multipart interface {
	// CreateUpload starts a multipart upload of key.
	CreateUpload(ctx context.Context, key string, opts PutOptions) (Upload, error)
	// AbortUpload aborts an upload started earlier (possibly by a process
	// that died), identified by the Upload's ID. Aborting an unknown or
	// finished upload is not an error.
	AbortUpload(ctx context.Context, key, uploadID string) error
}

// Upload is one multipart upload in progress. Part numbers start at 1; all
// parts but the last must be at least Caps.MinPartSize bytes. UploadPart and
// CopyPart may be called concurrently for different parts; uploading a part
// number again replaces it.
type Upload interface {
	// ID identifies the upload to AbortUpload (for crash recovery).
	ID() string
	UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error
	// CopyPart makes part n a server-side copy of srcKey[off:off+length].
	// It returns an error wrapping ErrUnsupported where the backend lacks it.
	CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error
	Complete(ctx context.Context) (ObjectInfo, error)
	Abort(ctx context.Context) error
}

// Reader is an object body. Info describes the object version being read.
type Reader interface {
	io.ReadCloser
	Info() ObjectInfo
}

// ObjectInfo describes one object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
	// Version is opaque (ETag on S3 and Azure, generation on GCS); compare it
	// only for equality. Every overwrite changes it.
	Version string
	// Metadata is user metadata (lower-case keys, without the provider's
	// prefix such as x-amz-meta-).
	Metadata map[string]string
	// ContentType is the object's media type as stored, where the call
	// returns it: Stat and NewReader on every backend, List where
	// Caps().ListMetadata ("" when unknown).
	ContentType string
}

// ReadOptions are the options of NewReader.
type ReadOptions struct {
	// IfVersion, when set, makes the read fail with ErrPrecondition unless
	// the object's current version equals it.
	IfVersion string
}

// ListOptions are the options of List.
type ListOptions struct {
	Prefix    string
	Delimiter string
	// Token continues a listing: pass the previous page's NextToken.
	Token string
	// MaxKeys bounds the page size (objects + prefixes); 0 = backend default.
	MaxKeys int
}

// ListPage is one page of a listing.
type ListPage struct {
	Objects  []ObjectInfo
	Prefixes []string // common prefixes, each ending in the delimiter
	// NextToken is empty on the last page.
	NextToken string
}

// PutOptions are the options of Put and CreateUpload.
type PutOptions struct {
	// IfVersion makes the write fail with ErrPrecondition unless the
	// current object has this version.
	IfVersion string
	// IfAbsent makes the write fail with ErrPrecondition if the key exists.
	IfAbsent    bool
	ContentType string
	Metadata    map[string]string
	// Tags are object tags where the backend has them (S3), else ignored.
	Tags map[string]string
	// CopyParts (CreateUpload only) tells the store that the caller may
	// call Upload.CopyPart: a store whose server cannot copy parts into an
	// upload with part checksums then starts one without them (its parts
	// are still protected by the transport or the signed payload).
	CopyParts bool
}

// CopyOptions are the options of Copy.
type CopyOptions struct {
	// IfVersion makes the copy fail with ErrPrecondition unless the source
	// has this version.
	IfVersion string
	// Metadata, when non-nil, replaces the destination's user metadata;
	// otherwise the source's metadata is kept.
	Metadata map[string]string
}

// DeleteOptions are the options of Delete.
type DeleteOptions struct {
	// IfVersion makes the delete fail with ErrPrecondition unless the
	// object has this version (where the backend supports it).
	IfVersion string
}

// Caps describes a backend's limits and features.
type Caps struct {
	Provider      string // "s3", "gs", "az", "mem"
	MaxObjectSize int64
	MaxSinglePut  int64 // largest object one Put may upload
	MinPartSize   int64 // smallest non-final multipart part
	MaxPartSize   int64
	MaxParts      int
	CopyPart      bool // Upload.CopyPart works
	Metadata      bool // user metadata is stored
	// ListMetadata: List fills ObjectInfo.Metadata as Stat does (GCS,
	// Azure); without it a listing carries none (S3).
	ListMetadata bool
	Tags         bool // object tags are stored
}

// ListAll pages through a listing and returns every object and prefix.
func ListAll(ctx context.Context, s Store, opts ListOptions) ([]ObjectInfo, []string, error) {
	var objs []ObjectInfo
	var prefixes []string
	for {
		page, err := s.List(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, page.Objects...)
		prefixes = append(prefixes, page.Prefixes...)
		if page.NextToken == "" {
			return objs, prefixes, nil
		}
		opts.Token = page.NextToken
	}
}

// PartSize returns the part size for an object of the given size (or
// expected size when unknown): the smallest power-of-two multiple of base,
// at least caps.MinPartSize, that fits the object in caps.MaxParts parts.
func PartSize(caps Caps, base, size int64) int64 {
	ps := base
	if ps < caps.MinPartSize {
		ps = caps.MinPartSize
	}
	maxParts := int64(caps.MaxParts)
	if maxParts <= 0 {
		maxParts = 10000
	}
	for size > ps*maxParts && (caps.MaxPartSize == 0 || ps*2 <= caps.MaxPartSize) {
		ps *= 2
	}
	return ps
}
