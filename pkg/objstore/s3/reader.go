package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// NewReader reads length bytes of key from off (GetObject with a Range;
// length < 0 reads to the end). A range that starts at or past the end
// yields an empty reader, as does length 0. With opts.IfVersion the read
// carries If-Match and fails with ErrPrecondition on another version.
// Other errors wrap ErrNotFound, ErrNoBucket, ErrPermission or
// ErrThrottled.
//
// The reader fails with an error wrapping io.ErrUnexpectedEOF when the body
// ends before the promised Content-Length, and with a timeout error when a
// Read waits longer than Config.RequestTimeout for data. Closing it
// releases the connection.
func (s *Store) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	if off < 0 {
		return nil, s.invalid("NewReader", key, fmt.Errorf("negative offset %d", off))
	}
	if length == 0 {
		info, err := s.head(ctx, "NewReader", key, opts.IfVersion)
		if err != nil {
			return nil, err
		}
		return emptyReader{info: info}, nil
	}
	in := &s3.GetObjectInput{
		Bucket:  &s.bucket,
		Key:     &key,
		IfMatch: quoteETag(opts.IfVersion),
	}
	ranged := off > 0 || length > 0
	if ranged {
		in.Range = aws.String(httpRange(off, length))
	}
	// The request context outlives this call: it is cancelled by Close, or
	// by the read watchdog when the body stalls.
	rctx, cancel := context.WithCancel(ctx)
	tctx, lw := objstore.WithLowWater(rctx)
	out, err := s.client.GetObject(tctx, in)
	if err != nil {
		cancel()
		err = s.wrap("NewReader", key, err)
		var e *objstore.Error
		if errors.As(err, &e) && (e.Status == http.StatusRequestedRangeNotSatisfiable || e.Code == "InvalidRange") {
			// The range starts at or past the end (or the object is empty).
			info, herr := s.head(ctx, "NewReader", key, opts.IfVersion)
			if herr != nil {
				return nil, herr
			}
			return emptyReader{info: info}, nil
		}
		return nil, err
	}

	info := objstore.ObjectInfo{
		Key:         key,
		Size:        aws.ToInt64(out.ContentLength),
		ModTime:     aws.ToTime(out.LastModified),
		Version:     unquoteETag(out.ETag),
		Metadata:    lowerKeys(out.Metadata),
		ContentType: aws.ToString(out.ContentType),
	}
	want := int64(-1) // bytes the body must hold; -1 when unknown
	if out.ContentLength != nil {
		want = *out.ContentLength
	}
	var body io.ReadCloser = out.Body
	total, partial := contentRangeTotal(aws.ToString(out.ContentRange))
	if partial {
		info.Size = total
	}
	if ranged && !partial {
		// The server ignored the Range and sent the whole object (200):
		// skip to off and cut at length ourselves.
		if off >= info.Size {
			out.Body.Close()
			cancel()
			return emptyReader{info: info}, nil
		}
		if _, err := io.CopyN(io.Discard, out.Body, off); err != nil {
			out.Body.Close()
			cancel()
			return nil, s.wrap("NewReader", key, fmt.Errorf("skip to offset %d: %w", off, noEOF(err)))
		}
		want = info.Size - off
		if length >= 0 && length < want {
			want = length
		}
		body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(out.Body, want), out.Body}
	} else {
		// A long body wakes this reader once per batch, not per piece.
		body = lw.Body(out.Body, want)
	}
	r := &reader{
		s:       s,
		key:     key,
		info:    info,
		body:    body,
		want:    want,
		cancel:  cancel,
		timeout: s.readTimeout,
	}
	r.watchdog = time.AfterFunc(time.Hour, r.stalled)
	r.watchdog.Stop()
	return r, nil
}

// contentRangeTotal parses the object size out of "bytes a-b/total".
func contentRangeTotal(cr string) (int64, bool) {
	i := strings.LastIndexByte(cr, '/')
	if i < 0 || cr[i+1:] == "*" {
		return 0, false
	}
	n, err := strconv.ParseInt(cr[i+1:], 10, 64)
	return n, err == nil
}

// noEOF turns an early io.EOF into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// emptyReader is the body of an empty range.
type emptyReader struct{ info objstore.ObjectInfo }

func (emptyReader) Read([]byte) (int, error)    { return 0, io.EOF }
func (emptyReader) Close() error                { return nil }
func (e emptyReader) Info() objstore.ObjectInfo { return e.info }

// reader is a GetObject body that checks its length and times out reads
// that make no progress. Reads are serialised; Close may run concurrently
// with a Read.
type reader struct {
	s       *Store
	key     string
	info    objstore.ObjectInfo
	body    io.ReadCloser
	cancel  context.CancelFunc // cancels the request (ends a blocked Read)
	timeout time.Duration
	// watchdog fires stalled when one Read takes longer than timeout.
	watchdog *time.Timer

	// want is the Content-Length (-1 unknown).
	want int64
	// readMu is held by Read, and by Close while it drains; it guards got
	// (bytes read so far) and err (the sticky final error).
	readMu sync.Mutex
	got    int64
	err    error

	// mu guards timedOut and closed, which the watchdog goroutine and Close
	// set.
	mu       sync.Mutex
	timedOut bool
	closed   bool
}

func (r *reader) Info() objstore.ObjectInfo { return r.info }

func (r *reader) Read(p []byte) (int, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	r.watchdog.Reset(r.timeout)
	n, err := r.body.Read(p)
	r.watchdog.Stop()
	r.got += int64(n)
	switch {
	case err == io.EOF && r.want >= 0 && r.got < r.want:
		err = fmt.Errorf("body cut after %d of %d bytes: %w", r.got, r.want, io.ErrUnexpectedEOF)
	case err == io.EOF:
		r.err = io.EOF
		return n, io.EOF
	case err == nil:
		return n, nil
	}
	r.mu.Lock()
	timedOut, closed := r.timedOut, r.closed
	r.mu.Unlock()
	switch {
	case closed:
		err = fmt.Errorf("read after Close: %w", err)
	case timedOut:
		err = fmt.Errorf("no data for %v: %w", r.timeout, errReadTimeout)
	}
	r.err = &objstore.Error{Provider: "s3", Op: "Read", Bucket: r.s.bucket, Key: r.key, Err: err}
	return n, r.err
}

// errReadTimeout reports a body read that made no progress in time.
var errReadTimeout = errors.New("read timed out")

// stalled runs on the watchdog's goroutine when a Read hangs.
func (r *reader) stalled() {
	r.mu.Lock()
	r.timedOut = true
	r.mu.Unlock()
	r.cancel()
}

// drainLimit is the most Close reads from an unfinished body so that its
// connection can be reused (closing it unread drops the connection).
const drainLimit = 64 << 10

// Close releases the body and its connection. It may be called while a
// Read is blocked (that Read then fails); a short unread rest of the body
// is drained first when no Read is running, so the connection is reused.
func (r *reader) Close() error {
	if r.readMu.TryLock() {
		if rest := r.want - r.got; r.err == nil && r.want >= 0 && rest > 0 && rest <= drainLimit {
			r.watchdog.Reset(r.timeout)
			_, _ = io.CopyN(io.Discard, r.body, rest)
		}
		r.readMu.Unlock()
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.watchdog.Stop()
	err := r.body.Close()
	r.cancel()
	return err
}
