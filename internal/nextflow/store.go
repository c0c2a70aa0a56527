package nextflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// ErrCommandMissing is returned by WaitCommand when the script never became
// visible; the supervisor exits 127 (Fusion's code for it). It wraps
// objstore.ErrNotFound.
var ErrCommandMissing = fmt.Errorf("task script not found: %w", objstore.ErrNotFound)

// WaitOptions tune WaitCommand.
type WaitOptions struct {
	// Attempts is the number of Stat calls (FUSION_MAX_MOUNT_RETRIES);
	// values below 1 mean 1.
	Attempts int
	// Initial is the first pause (default 250ms); it doubles up to Max
	// (default 5s).
	Initial, Max time.Duration
}

// WaitCommand waits until key (the task's .command.sh) exists in st,
// stat-ing it up to opts.Attempts times with exponential backoff. It
// returns nil once it exists; an error wrapping ErrCommandMissing after the
// last attempt still found nothing; the store's error at once for any
// other failure (permission, a dead endpoint after the store's own
// retries); ctx.Err() when ctx ends.
func WaitCommand(ctx context.Context, st objstore.Store, key string, opts WaitOptions) error {
	if opts.Attempts < 1 {
		opts.Attempts = 1
	}
	if opts.Initial <= 0 {
		opts.Initial = 250 * time.Millisecond
	}
	if opts.Max < opts.Initial {
		opts.Max = max(5*time.Second, opts.Initial)
	}
	pause := opts.Initial
	for attempt := 1; ; attempt++ {
		_, err := st.Stat(ctx, key)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, objstore.ErrNotFound):
			return err
		case attempt >= opts.Attempts:
			return fmt.Errorf("%w: %s after %d attempts", ErrCommandMissing, key, attempt)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, opts.Max)
	}
}

// UploadFile uploads the local file at localPath to key in st with opts.
// Files larger than the backend's single-Put limit go up as a multipart
// upload (aborted on failure) when the store supports it. It returns the
// new object's info, or the open/stat error, or the store's error.
func UploadFile(ctx context.Context, st objstore.Store, key, localPath string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	f, err := os.Open(localPath)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	size := fi.Size()
	caps := st.Caps()
	if caps.MaxSinglePut <= 0 || size <= caps.MaxSinglePut {
		return st.Put(ctx, key, f, size, opts)
	}
	mp, ok := st.(objstore.Multipart)
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("upload %s: %d bytes exceed the single-put limit and the store has no multipart: %w", key, size, objstore.ErrUnsupported)
	}
	const basePart = 64 << 20
	return uploadParts(ctx, mp, key, f, size, objstore.PartSize(caps, basePart, size), opts)
}

// uploadParts uploads src sequentially in parts of ps bytes.
func uploadParts(ctx context.Context, mp objstore.Multipart, key string, src io.ReaderAt, size, ps int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	up, err := mp.CreateUpload(ctx, key, opts)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	fail := func(err error) (objstore.ObjectInfo, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = up.Abort(actx)
		return objstore.ObjectInfo{}, err
	}
	for n, off := 1, int64(0); off < size; n, off = n+1, off+ps {
		l := min(ps, size-off)
		if err := up.UploadPart(ctx, n, io.NewSectionReader(src, off, l), l); err != nil {
			return fail(err)
		}
	}
	info, err := up.Complete(ctx)
	if err != nil {
		return fail(err)
	}
	return info, nil
}
