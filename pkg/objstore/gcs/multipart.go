package gcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// PartInfix marks the temporary objects of a multipart upload (a parallel
// composite upload): upload ID of key keeps its parts, intermediate
// composites and a marker under "<key>.ferry-part/<ID>/". List hides every
// name containing it; Complete and Abort delete them.
const PartInfix = ".ferry-part/"

// Compose limits.
const (
	maxComposeSources = 32 // sources per compose request
	composeParallel   = 8  // concurrent compose requests of one level
	deleteParallel    = 16 // concurrent deletes of temporaries
	markerName        = "upload"
)

func isPartName(name string) bool { return name != "" && strings.Contains(name, PartInfix) }

func partPrefix(key, id string) string { return key + PartInfix + id + "/" }

// upload is one parallel composite upload.
type upload struct {
	s      *Store
	key    string
	id     string
	prefix string
	opts   objstore.PutOptions
	parts  objstore.UploadParts[int64] // part number → generation of its temporary object
}

// finished returns an error wrapping objstore.ErrNotFound when the upload
// is completed or aborted (state is not active).
func (u *upload) finished(op string, state objstore.UploadState) error {
	if state == objstore.UploadActive {
		return nil
	}
	return &objstore.Error{Provider: "gs", Op: op, Bucket: u.s.cfg.Bucket, Key: u.key, Status: http.StatusNotFound,
		Kind: objstore.ErrNotFound, Err: fmt.Errorf("gcs: upload %s was %s", u.id, state)}
}

var _ objstore.Upload = (*upload)(nil)

// CreateUpload starts a multipart upload of key: it stores an empty marker
// object under the upload's temporary prefix. The preconditions in opts are
// checked by Complete's final compose.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	id, err := objstore.NewUploadID()
	if err != nil {
		return nil, err
	}
	u := &upload{s: s, key: key, id: id, prefix: partPrefix(key, id), opts: opts}
	u.opts.Metadata = lowerKeys(opts.Metadata)
	if _, err := s.upload(ctx, "CreateUpload", u.prefix+markerName, bytes.NewReader(nil), 0,
		storage.Conditions{}, "", nil); err != nil {
		return nil, err
	}
	return u, nil
}

// AbortUpload deletes the temporary objects of upload uploadID of key.
// An unknown or finished upload is not an error.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	if !objstore.ValidUploadID(uploadID) { // never delete below a prefix we did not make
		return nil
	}
	return s.deletePrefix(ctx, partPrefix(key, uploadID), nil)
}

// ID returns the upload ID for AbortUpload.
func (u *upload) ID() string { return u.id }

func (u *upload) check(op string, n int) error {
	if n < 1 || n > MaxParts {
		return u.s.badRequest(op, u.key, "InvalidPartNumber", fmt.Errorf("part number %d outside [1, %d]", n, MaxParts))
	}
	return u.finished(op, u.parts.State())
}

// UploadPart stores part n as a temporary object (replacing an earlier
// part n). Errors wrap objstore.ErrNotFound once the upload is finished.
func (u *upload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	if err := u.check("UploadPart", n); err != nil {
		return err
	}
	a, err := u.s.upload(ctx, "UploadPart", fmt.Sprintf("%spart-%05d", u.prefix, n), src, size, storage.Conditions{}, "", nil)
	if err != nil {
		return err
	}
	u.parts.Set(n, a.Generation)
	return nil
}

// CopyPart is not available: GCS cannot copy a byte range on the server.
// The error wraps objstore.ErrUnsupported (Caps.CopyPart is false).
func (u *upload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	return &objstore.Error{Provider: "gs", Op: "CopyPart", Bucket: u.s.cfg.Bucket, Key: srcKey,
		Kind: objstore.ErrUnsupported, Err: errors.New("gcs: no server-side range copy")}
}

// Complete composes the parts, in part-number order, into the object (in
// a tree of composes when there are more than 32), then deletes the
// temporaries. Errors wrap objstore.ErrPrecondition when the PutOptions
// preconditions fail (the upload then stays pending, to be aborted), and
// objstore.ErrNotFound when the upload was aborted or completed.
func (u *upload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	state, nums, gens := u.parts.Parts()
	if err := u.finished("Complete", state); err != nil {
		return objstore.ObjectInfo{}, err
	}
	srcs := make([]*storage.ObjectHandle, len(nums))
	names := make([]string, len(nums))
	for i, n := range nums {
		names[i] = fmt.Sprintf("%spart-%05d", u.prefix, n)
		srcs[i] = u.s.bkt.Object(names[i]).Generation(gens[n])
	}
	if len(srcs) == 0 {
		return objstore.ObjectInfo{}, u.s.badRequest("Complete", u.key, "NoParts", errors.New("gcs: no parts uploaded"))
	}
	conds, err := u.conditions(ctx)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	for level := 0; len(srcs) > maxComposeSources; level++ {
		if srcs, err = u.composeLevel(ctx, level, srcs); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	dst := u.s.bkt.Object(u.key)
	if conds != (storage.Conditions{}) {
		dst = dst.If(conds)
	}
	c := dst.ComposerFrom(srcs...)
	c.ContentType = u.opts.ContentType
	if c.ContentType == "" {
		c.ContentType = "application/octet-stream"
	}
	c.Metadata = u.opts.Metadata
	a, err := c.Run(ctx)
	if err != nil {
		return objstore.ObjectInfo{}, u.s.wrap("Complete", u.key, objectScope, err)
	}
	u.parts.Finish(objstore.UploadCompleted)
	// The object is durable; temporaries left by a failed delete are
	// removed by a later AbortUpload.
	_ = u.s.deletePrefix(ctx, u.prefix, names)
	return info(a), nil
}

// conditions returns the final compose's preconditions. On an emulator,
// which ignores them on compose, it also checks them (and that the upload
// was not aborted) on the client.
func (u *upload) conditions(ctx context.Context) (storage.Conditions, error) {
	var conds storage.Conditions
	switch {
	case u.opts.IfAbsent:
		conds.DoesNotExist = true
	case u.opts.IfVersion != "":
		gen, ok := parseVersion(u.opts.IfVersion)
		if !ok {
			return conds, u.s.preconditionErr("Complete", u.key, fmt.Errorf("version %q is no generation", u.opts.IfVersion))
		}
		conds.GenerationMatch = gen
	}
	if !u.s.cfg.Emulator {
		return conds, nil
	}
	if _, err := u.s.bkt.Object(u.prefix + markerName).Attrs(ctx); err != nil {
		return conds, u.s.wrap("Complete", u.key, objectScope, fmt.Errorf("upload %s: %w", u.id, err))
	}
	switch {
	case u.opts.IfAbsent:
		_, err := u.s.Stat(ctx, u.key)
		if err == nil {
			return conds, u.s.preconditionErr("Complete", u.key, errors.New("object exists"))
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return conds, err
		}
	case u.opts.IfVersion != "":
		if _, err := u.s.statIf(ctx, "Complete", u.key, u.opts.IfVersion); err != nil {
			if errors.Is(err, objstore.ErrNotFound) {
				return conds, missingAsPrecondition(err)
			}
			return conds, err
		}
	}
	return conds, nil
}

// composeLevel composes srcs in groups of 32 into intermediate temporaries
// and returns those.
func (u *upload) composeLevel(ctx context.Context, level int, srcs []*storage.ObjectHandle) ([]*storage.ObjectHandle, error) {
	groups := (len(srcs) + maxComposeSources - 1) / maxComposeSources
	out := make([]*storage.ObjectHandle, groups)
	err := parallel(ctx, groups, composeParallel, func(ctx context.Context, i int) error {
		group := srcs[i*maxComposeSources : min((i+1)*maxComposeSources, len(srcs))]
		name := fmt.Sprintf("%scompose-%d-%05d", u.prefix, level, i)
		c := u.s.bkt.Object(name).ComposerFrom(group...)
		c.ContentType = "application/octet-stream"
		a, err := c.Run(ctx)
		if err != nil {
			return u.s.wrap("Complete", u.key, objectScope, err)
		}
		out[i] = u.s.bkt.Object(name).Generation(a.Generation)
		return nil
	})
	return out, err
}

// Abort deletes the upload's temporaries. Aborting a finished upload is
// not an error.
func (u *upload) Abort(ctx context.Context) error {
	if u.parts.Finish(objstore.UploadAborted) == objstore.UploadCompleted {
		return nil
	}
	return u.s.deletePrefix(ctx, u.prefix, nil)
}

// deletePrefix deletes every object under prefix (found by listing, plus
// known, for names the listing may miss). Missing objects are fine.
func (s *Store) deletePrefix(ctx context.Context, prefix string, known []string) error {
	names := make(map[string]bool)
	for _, n := range known {
		names[n] = true
	}
	it := s.bkt.Objects(ctx, &storage.Query{Prefix: prefix})
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return s.wrap("AbortUpload", prefix, bucketScope, err)
		}
		names[a.Name] = true
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	return parallel(ctx, len(list), deleteParallel, func(ctx context.Context, i int) error {
		err := s.bkt.Object(list[i]).Delete(ctx)
		if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
			return nil
		}
		return s.wrap("AbortUpload", list[i], objectScope, err)
	})
}

// parallel runs fn(0..n-1) with at most limit at a time and returns the
// first error; after an error, the remaining calls see a canceled context.
// It returns when every started call has returned.
func parallel(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, limit)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // owner: parallel, which waits for it below
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return firstErr
}
