package mem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Default limits, mirroring S3.
const (
	DefaultMinPartSize  = 5 << 20
	DefaultMaxSinglePut = 5 << 30
	maxPartSize         = 5 << 30
	maxObjectSize       = 5 << 40
	maxParts            = 10000
	defaultMaxKeys      = 1000
)

// errClosed is returned by every operation after Close.
var errClosed = errors.New("mem: store is closed")

// Options configure a Store. The zero value is usable.
type Options struct {
	// Bucket names the store in errors; default "mem".
	Bucket string
	// MinPartSize is the smallest non-final multipart part; default 5 MiB.
	// Tests set it small to exercise multipart with little data.
	MinPartSize int64
	// MaxSinglePut is the largest object Put accepts; default 5 GiB.
	MaxSinglePut int64
	// Now returns the time stamped as ModTime; default time.Now. Tests pass
	// a fake clock.
	Now func() time.Time
	// NoListMetadata makes listings carry no user metadata, as on S3
	// (Caps.ListMetadata false).
	NoListMetadata bool
}

// object is one stored object. data is never mutated after it is stored:
// an overwrite replaces the whole object, so readers may share the slice.
type object struct {
	data []byte
	info objstore.ObjectInfo
	tags map[string]string
}

// Store is an in-memory bucket. All methods are safe for concurrent use.
type Store struct {
	opts Options

	// mu guards objects, uploads, seq and closed.
	mu      sync.Mutex
	objects map[string]*object
	uploads map[string]*upload // by upload ID
	seq     uint64             // source of versions and upload IDs
	closed  bool
}

var (
	_ objstore.Store     = (*Store)(nil)
	_ objstore.Multipart = (*Store)(nil)
)

// New returns an empty Store.
func New(opts Options) *Store {
	if opts.Bucket == "" {
		opts.Bucket = "mem"
	}
	if opts.MinPartSize <= 0 {
		opts.MinPartSize = DefaultMinPartSize
	}
	if opts.MaxSinglePut <= 0 {
		opts.MaxSinglePut = DefaultMaxSinglePut
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{
		opts:    opts,
		objects: make(map[string]*object),
		uploads: make(map[string]*upload),
	}
}

// Caps reports the store's limits: those of S3, with MinPartSize and
// MaxSinglePut taken from Options.
func (s *Store) Caps() objstore.Caps {
	return objstore.Caps{
		Provider:      "mem",
		MaxObjectSize: maxObjectSize,
		MaxSinglePut:  s.opts.MaxSinglePut,
		MinPartSize:   s.opts.MinPartSize,
		MaxPartSize:   maxPartSize,
		MaxParts:      maxParts,
		CopyPart:      true,
		Metadata:      true,
		ListMetadata:  !s.opts.NoListMetadata,
		Tags:          true,
	}
}

// Close marks the store closed; later calls fail. It never fails.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Len returns the number of stored objects.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Tags returns a copy of the object's tags, or an error wrapping
// objstore.ErrNotFound.
func (s *Store) Tags(key string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, s.err("Tags", key, objstore.ErrNotFound, nil)
	}
	return cloneMap(o.tags), nil
}

// err builds an *objstore.Error with the HTTP status a cloud would send.
func (s *Store) err(op, key string, kind, cause error) error {
	e := &objstore.Error{Provider: "mem", Op: op, Bucket: s.opts.Bucket, Key: key, Kind: kind, Err: cause}
	switch kind {
	case objstore.ErrNotFound:
		e.Status, e.Code = 404, "NoSuchKey"
	case objstore.ErrPrecondition:
		e.Status, e.Code = 412, "PreconditionFailed"
	}
	return e
}

// badRequest is a final (non-retryable) client error.
func (s *Store) badRequest(op, key, code string, cause error) error {
	return &objstore.Error{Provider: "mem", Op: op, Bucket: s.opts.Bucket, Key: key, Status: 400, Code: code, Err: cause}
}

// begin checks ctx and the closed flag and locks s.mu; the caller unlocks.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// nextVersionLocked returns a fresh version. s.mu must be held.
func (s *Store) nextVersionLocked() string {
	s.seq++
	return strconv.FormatUint(s.seq, 10)
}

// checkPutLocked applies PutOptions preconditions to key. s.mu must be held.
func (s *Store) checkPutLocked(op, key string, opts objstore.PutOptions) error {
	cur, exists := s.objects[key]
	if opts.IfAbsent && exists {
		return s.err(op, key, objstore.ErrPrecondition, errors.New("object exists"))
	}
	if opts.IfVersion != "" && (!exists || cur.info.Version != opts.IfVersion) {
		return s.err(op, key, objstore.ErrPrecondition, fmt.Errorf("version is not %q", opts.IfVersion))
	}
	return nil
}

// storeLocked stores data under key and returns its info. s.mu must be held.
func (s *Store) storeLocked(key string, data []byte, meta, tags map[string]string, contentType string) objstore.ObjectInfo {
	o := &object{
		data: data,
		info: objstore.ObjectInfo{
			Key:         key,
			Size:        int64(len(data)),
			ModTime:     s.opts.Now(),
			Version:     s.nextVersionLocked(),
			Metadata:    lowerKeys(meta),
			ContentType: contentType,
		},
		tags: cloneMap(tags),
	}
	s.objects[key] = o
	return o.publicInfo()
}

// publicInfo returns a copy of the info the caller may mutate.
func (o *object) publicInfo() objstore.ObjectInfo {
	info := o.info
	info.Metadata = cloneMap(o.info.Metadata)
	return info
}

// Stat returns the object's info, or an error wrapping objstore.ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := s.begin(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return objstore.ObjectInfo{}, s.err("Stat", key, objstore.ErrNotFound, nil)
	}
	return o.publicInfo(), nil
}

// NewReader returns a reader of key[off:off+length] (length < 0: to the
// end), truncated to the object's end. Errors wrap objstore.ErrNotFound or,
// when opts.IfVersion does not match, objstore.ErrPrecondition.
func (s *Store) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	if off < 0 {
		return nil, s.badRequest("NewReader", key, "InvalidRange", fmt.Errorf("negative offset %d", off))
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, s.err("NewReader", key, objstore.ErrNotFound, nil)
	}
	if opts.IfVersion != "" && o.info.Version != opts.IfVersion {
		return nil, s.err("NewReader", key, objstore.ErrPrecondition, fmt.Errorf("version is not %q", opts.IfVersion))
	}
	size := int64(len(o.data))
	start := min(off, size)
	end := size
	if length >= 0 && start+length < size {
		end = start + length
	}
	return &reader{ctx: ctx, r: bytes.NewReader(o.data[start:end]), info: o.publicInfo()}, nil
}

// reader is an in-memory body; Read fails once its context is done.
type reader struct {
	ctx  context.Context
	r    *bytes.Reader
	info objstore.ObjectInfo
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (r *reader) Close() error { return nil }

func (r *reader) Info() objstore.ObjectInfo { return r.info }

// Put stores size bytes of src under key. Errors wrap
// objstore.ErrPrecondition when opts.IfAbsent or opts.IfVersion fail; an
// object larger than Options.MaxSinglePut, or a src shorter than size, is a
// final 400 error.
func (s *Store) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := validKey(key); err != nil {
		return objstore.ObjectInfo{}, s.badRequest("Put", key, "InvalidKey", err)
	}
	if size < 0 || size > s.opts.MaxSinglePut {
		return objstore.ObjectInfo{}, s.badRequest("Put", key, "EntityTooLarge", fmt.Errorf("size %d outside [0, %d]", size, s.opts.MaxSinglePut))
	}
	data, err := readAll(src, size)
	if err != nil {
		return objstore.ObjectInfo{}, s.badRequest("Put", key, "IncompleteBody", err)
	}
	if err := s.begin(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer s.mu.Unlock()
	if err := s.checkPutLocked("Put", key, opts); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.storeLocked(key, data, opts.Metadata, opts.Tags, opts.ContentType), nil
}

// Copy copies src to dst. Errors wrap objstore.ErrNotFound when src is
// missing and objstore.ErrPrecondition when opts.IfVersion does not match
// src's version.
func (s *Store) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	if err := validKey(dst); err != nil {
		return objstore.ObjectInfo{}, s.badRequest("Copy", dst, "InvalidKey", err)
	}
	if err := s.begin(ctx); err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer s.mu.Unlock()
	o, ok := s.objects[src]
	if !ok {
		return objstore.ObjectInfo{}, s.err("Copy", src, objstore.ErrNotFound, nil)
	}
	if opts.IfVersion != "" && o.info.Version != opts.IfVersion {
		return objstore.ObjectInfo{}, s.err("Copy", src, objstore.ErrPrecondition, fmt.Errorf("version is not %q", opts.IfVersion))
	}
	meta := o.info.Metadata
	if opts.Metadata != nil {
		meta = opts.Metadata
	}
	return s.storeLocked(dst, o.data, meta, o.tags, o.info.ContentType), nil
}

// Delete removes key. A missing key is not an error unless opts.IfVersion
// is set, in which case (as on a version mismatch) the error wraps
// objstore.ErrPrecondition.
func (s *Store) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if opts.IfVersion != "" && (!ok || o.info.Version != opts.IfVersion) {
		return s.err("Delete", key, objstore.ErrPrecondition, fmt.Errorf("version is not %q", opts.IfVersion))
	}
	delete(s.objects, key)
	return nil
}

// readAll reads exactly size bytes of src. A short or failing source is
// the caller's fault: callers report it as a final 400 IncompleteBody.
func readAll(src io.ReaderAt, size int64) ([]byte, error) {
	data := make([]byte, size)
	if size == 0 {
		return data, nil
	}
	n, err := src.ReadAt(data, 0)
	if int64(n) == size {
		return data, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("mem: reading source: %w", err)
}

// validKey rejects keys no cloud accepts.
func validKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	if len(key) > 1024 {
		return errors.New("key longer than 1024 bytes")
	}
	return nil
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// lowerKeys copies m with lower-case keys, as S3 and GCS return them.
func lowerKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[strings.ToLower(k)] = v
	}
	return c
}
