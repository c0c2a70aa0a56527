package supervise

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// InstrumentOptions configure Instrument.
type InstrumentOptions struct {
	// Metrics receives every call; nil records nothing.
	Metrics *metrics.Backend
	// Provider is the backend label ("s3", "gs", "az"); default
	// s.Caps().Provider.
	Provider string
	// Logger, when set, receives one warning per call that failed for good
	// (metrics.Result.Failure), with provider, operation, bucket, key, HTTP
	// status and the cloud's request id when the error carries them.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Instrument returns s recording every call into opts.Metrics: its
// operation, result, latency and payload bytes. Wrap the retry-decorated
// store, so one call is one logical request (attempts are counted by
// RetryHook). When s implements objstore.Multipart so does the result,
// and its Uploads are instrumented too. Bodies from NewReader count their
// bytes as they stream and are observed once, as op "Read", when they end
// (io.EOF, an error or Close). Errors come back unchanged.
func Instrument(s objstore.Store, opts InstrumentOptions) objstore.Store {
	if opts.Provider == "" {
		opts.Provider = s.Caps().Provider
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	is := &instrStore{inner: s, o: opts}
	if mp, ok := s.(objstore.Multipart); ok {
		return &instrMultipart{instrStore: is, mp: mp}
	}
	return is
}

// RetryHook returns an objstore.RetryPolicy.OnRetry function that counts
// each retry in m under provider, then calls next (when not nil).
func RetryHook(m *metrics.Backend, provider string, next func(op string, attempt int, err error)) func(op string, attempt int, err error) {
	return func(op string, attempt int, err error) {
		m.Retry(op, provider)
		if next != nil {
			next(op, attempt, err)
		}
	}
}

// classify maps an error onto its bounded metrics result.
func classify(err error) metrics.Result {
	switch {
	case err == nil:
		return metrics.ResultOK
	case errors.Is(err, objstore.ErrNotFound):
		return metrics.ResultNotFound
	case errors.Is(err, objstore.ErrPrecondition):
		return metrics.ResultPrecondition
	case errors.Is(err, objstore.ErrPermission):
		return metrics.ResultPermission
	case errors.Is(err, objstore.ErrThrottled):
		return metrics.ResultThrottled
	case errors.Is(err, objstore.ErrUnsupported):
		return metrics.ResultUnsupported
	case errors.Is(err, context.Canceled):
		return metrics.ResultCanceled
	}
	return metrics.ResultError
}

// instrStore is the Store returned by Instrument. It is immutable.
type instrStore struct {
	inner objstore.Store
	o     InstrumentOptions
}

// instrMultipart is an instrStore over a Multipart store.
type instrMultipart struct {
	*instrStore
	mp objstore.Multipart
}

var (
	_ objstore.Store     = (*instrStore)(nil)
	_ objstore.Multipart = (*instrMultipart)(nil)
	_ objstore.Upload    = (*instrUpload)(nil)
	_ objstore.Reader    = (*instrReader)(nil)
)

// observe records one call that started at t0 and ended with err.
func (s *instrStore) observe(op, key string, t0 time.Time, err error, read, written int64) {
	res := classify(err)
	s.o.Metrics.Observe(metrics.Call{
		Op: op, Backend: s.o.Provider, Result: res, Duration: s.o.Now().Sub(t0),
		ReadBytes: read, WrittenBytes: written,
	})
	if res.Failure() && s.o.Logger != nil {
		s.o.Logger.Warn("backend request failed", errorAttrs(s.o.Provider, op, key, err)...)
	}
}

// errorAttrs are the log attributes of a failed call: what a user needs to
// find the request in the cloud's logs, and never a credential (an
// objstore.Error carries none).
func errorAttrs(provider, op, key string, err error) []any {
	attrs := []any{"provider", provider, "op", op, "key", key}
	var e *objstore.Error
	if errors.As(err, &e) {
		attrs = append(attrs, "bucket", e.Bucket)
		if e.Status != 0 {
			attrs = append(attrs, "status", e.Status)
		}
		if e.Code != "" {
			attrs = append(attrs, "code", e.Code)
		}
		if e.RequestID != "" {
			attrs = append(attrs, "request_id", e.RequestID)
		}
	}
	return append(attrs, "err", err.Error())
}

// Unwrap returns the inner store.
func (s *instrStore) Unwrap() objstore.Store { return s.inner }

func (s *instrStore) Caps() objstore.Caps { return s.inner.Caps() }

func (s *instrStore) Close() error { return s.inner.Close() }

func (s *instrStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	t0 := s.o.Now()
	info, err := s.inner.Stat(ctx, key)
	s.observe("Stat", key, t0, err, 0, 0)
	return info, err
}

func (s *instrStore) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	t0 := s.o.Now()
	page, err := s.inner.List(ctx, opts)
	s.observe("List", opts.Prefix, t0, err, 0, 0)
	return page, err
}

func (s *instrStore) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	t0 := s.o.Now()
	info, err := s.inner.Put(ctx, key, src, size, opts)
	s.observe("Put", key, t0, err, 0, sentBytes(err, size))
	return info, err
}

func (s *instrStore) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	t0 := s.o.Now()
	info, err := s.inner.Copy(ctx, src, dst, opts)
	s.observe("Copy", dst, t0, err, 0, 0)
	return info, err
}

func (s *instrStore) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	t0 := s.o.Now()
	err := s.inner.Delete(ctx, key, opts)
	s.observe("Delete", key, t0, err, 0, 0)
	return err
}

// sentBytes is the payload a write call delivered: all of it on success,
// none on failure (a failed upload is sent again).
func sentBytes(err error, size int64) int64 {
	if err != nil {
		return 0
	}
	return size
}

// NewReader observes the open as "NewReader" and returns a body that
// counts its bytes and is observed as "Read" when it ends.
func (s *instrStore) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	t0 := s.o.Now()
	r, err := s.inner.NewReader(ctx, key, off, length, opts)
	s.observe("NewReader", key, t0, err, 0, 0)
	if err != nil {
		return nil, err
	}
	return &instrReader{Reader: r, s: s, key: key, t0: s.o.Now()}, nil
}

// instrReader counts a body's bytes. Read is used by one goroutine at a
// time (io.Reader), but Close may race with it (a reader cancelled from
// another goroutine), so the end is recorded once under mu.
type instrReader struct {
	objstore.Reader
	s   *instrStore
	key string
	t0  time.Time

	mu   sync.Mutex // guards done
	done bool       // the body's end was observed
}

// Read passes through, counting bytes at once (so /metrics moves during a
// long body) and observing the end at io.EOF or the first error.
func (r *instrReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	r.s.o.Metrics.AddRead("Read", r.s.o.Provider, int64(n))
	if err == io.EOF {
		r.end(nil)
	} else if err != nil {
		r.end(err)
	}
	return n, err
}

// Close closes the body; a body closed before its end counts as ok (the
// caller stopped reading).
func (r *instrReader) Close() error {
	err := r.Reader.Close()
	r.end(nil)
	return err
}

func (r *instrReader) end(err error) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	r.done = true
	r.mu.Unlock()
	r.s.observe("Read", r.key, r.t0, err, 0, 0) // bytes were counted by Read
}

// CreateUpload observes the call and instruments the Upload.
func (s *instrMultipart) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	t0 := s.o.Now()
	u, err := s.mp.CreateUpload(ctx, key, opts)
	s.observe("CreateUpload", key, t0, err, 0, 0)
	if err != nil {
		return nil, err
	}
	return &instrUpload{u: u, s: s.instrStore, key: key}, nil
}

func (s *instrMultipart) AbortUpload(ctx context.Context, key, uploadID string) error {
	t0 := s.o.Now()
	err := s.mp.AbortUpload(ctx, key, uploadID)
	s.observe("AbortUpload", key, t0, err, 0, 0)
	return err
}

// instrUpload instruments one multipart upload. It is immutable.
type instrUpload struct {
	u   objstore.Upload
	s   *instrStore
	key string
}

func (u *instrUpload) ID() string { return u.u.ID() }

func (u *instrUpload) UploadPart(ctx context.Context, n int, src io.ReaderAt, size int64) error {
	t0 := u.s.o.Now()
	err := u.u.UploadPart(ctx, n, src, size)
	u.s.observe("UploadPart", u.key, t0, err, 0, sentBytes(err, size))
	return err
}

func (u *instrUpload) CopyPart(ctx context.Context, n int, srcKey string, off, length int64) error {
	t0 := u.s.o.Now()
	err := u.u.CopyPart(ctx, n, srcKey, off, length)
	u.s.observe("CopyPart", u.key, t0, err, 0, 0)
	return err
}

func (u *instrUpload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	t0 := u.s.o.Now()
	info, err := u.u.Complete(ctx)
	u.s.observe("Complete", u.key, t0, err, 0, 0)
	return info, err
}

func (u *instrUpload) Abort(ctx context.Context) error {
	t0 := u.s.o.Now()
	err := u.u.Abort(ctx)
	u.s.observe("Abort", u.key, t0, err, 0, 0)
	return err
}
