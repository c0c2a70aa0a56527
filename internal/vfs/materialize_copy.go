package vfs

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// streamPartSize is the part size of streamed multipart copies.
const streamPartSize = 64 << 20

// streamCopy copies src:srcKey to dst:dstKey through this process (the
// stores are different buckets, maybe different backends). The source
// version is pinned: a concurrent overwrite fails the copy with
// objstore.ErrPrecondition instead of mixing two versions.
func streamCopy(ctx context.Context, src objstore.Store, srcKey string, dst objstore.Store, dstKey string) (objstore.ObjectInfo, error) {
	info, err := src.Stat(ctx, srcKey)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	ra := &remoteReaderAt{ctx: ctx, st: src, key: srcKey, version: info.Version, size: info.Size}
	defer ra.Close()
	opts := objstore.PutOptions{Metadata: info.Metadata}
	caps := dst.Caps()
	if caps.MaxSinglePut <= 0 || info.Size <= caps.MaxSinglePut {
		return dst.Put(ctx, dstKey, ra, info.Size, opts)
	}
	mp, ok := dst.(objstore.Multipart)
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("copy %s: %d bytes exceed the single-put limit: %w", dstKey, info.Size, objstore.ErrUnsupported)
	}
	up, err := mp.CreateUpload(ctx, dstKey, opts)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	abort := func(err error) (objstore.ObjectInfo, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = up.Abort(actx)
		return objstore.ObjectInfo{}, err
	}
	ps := objstore.PartSize(caps, streamPartSize, info.Size)
	for n, off := 1, int64(0); off < info.Size; n, off = n+1, off+ps {
		l := min(ps, info.Size-off)
		if err := up.UploadPart(ctx, n, io.NewSectionReader(ra, off, l), l); err != nil {
			return abort(err)
		}
	}
	out, err := up.Complete(ctx)
	if err != nil {
		return abort(err)
	}
	return out, nil
}

// remoteReaderAt is an io.ReaderAt over one object version. Sequential
// reads (what uploads do) are served from one open body; a read at
// another offset (an SDK rewinding to retry) reopens it there.
type remoteReaderAt struct {
	ctx     context.Context
	st      objstore.Store
	key     string
	version string
	size    int64

	mu  sync.Mutex      // guards rd and pos
	rd  objstore.Reader // open body, or nil; guarded by mu
	pos int64           // offset of rd's next byte; guarded by mu
}

// ReadAt implements io.ReaderAt.
func (r *remoteReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rd == nil || r.pos != off {
		if r.rd != nil {
			r.rd.Close()
		}
		rd, err := r.st.NewReader(r.ctx, r.key, off, -1, objstore.ReadOptions{IfVersion: r.version})
		if err != nil {
			r.rd = nil
			return 0, err
		}
		r.rd, r.pos = rd, off
	}
	want := min(int64(len(p)), r.size-off)
	n, err := io.ReadFull(r.rd, p[:want])
	r.pos += int64(n)
	if err != nil {
		r.rd.Close()
		r.rd = nil
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			err = fmt.Errorf("object %s shorter than %d bytes: %w", r.key, r.size, io.ErrUnexpectedEOF)
		}
		return n, err
	}
	if int64(n) < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// Close releases the open body.
func (r *remoteReaderAt) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rd != nil {
		r.rd.Close()
		r.rd = nil
	}
}
