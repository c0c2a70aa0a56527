package objstore

import (
	"errors"
	"fmt"
	"io"
)

// This file holds small helpers that HTTP drivers share (gcs and azure use
// them; a third-party driver may too): a body reader that enforces the
// promised length, and the error of a conditional operation on a missing
// object. Multipart bookkeeping is in driverupload.go.

// NewRangeReader returns the Reader of a ranged download: body holds
// length bytes at off (length < 0: to the end) of the object that info
// describes. Reading fails with an error wrapping io.ErrUnexpectedEOF when
// body ends before min(info.Size-off, length) bytes, so that a cut body is
// never a short io.EOF. wrap turns every read error other than io.EOF into
// the driver's error (an *Error naming the "Read" operation). Close closes
// body.
func NewRangeReader(body io.ReadCloser, info ObjectInfo, off, length int64, wrap func(error) error) Reader {
	want := max(info.Size-off, 0)
	if length >= 0 && length < want {
		want = length
	}
	return &rangeReader{body: body, info: info, want: want, wrap: wrap}
}

// EmptyReader returns a Reader of no bytes describing info: a range at or
// past the end of an object.
func EmptyReader(info ObjectInfo) Reader { return &rangeReader{info: info} }

// rangeReader counts the bytes of a body. A nil body is empty. Like any
// Reader, it is used by one goroutine at a time.
type rangeReader struct {
	body io.ReadCloser
	info ObjectInfo
	wrap func(error) error
	want int64 // bytes the body must deliver
	got  int64
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.body == nil {
		return 0, io.EOF
	}
	n, err := r.body.Read(p)
	r.got += int64(n)
	switch {
	case err == io.EOF && r.got < r.want:
		return n, r.wrap(fmt.Errorf("body of %s ended after %d of %d bytes: %w", r.info.Key, r.got, r.want, io.ErrUnexpectedEOF))
	case err != nil && err != io.EOF:
		return n, r.wrap(err)
	}
	return n, err
}

func (r *rangeReader) Close() error {
	if r.body == nil {
		return nil
	}
	return r.body.Close()
}

func (r *rangeReader) Info() ObjectInfo { return r.info }

// IsError reports whether err carries an *Error: a driver that wraps the
// errors of its SDK returns such an error as is, since it already
// describes the request.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// MissingAsPrecondition turns err, an *Error wrapping ErrNotFound, into the
// ErrPrecondition of a conditional operation (IfVersion) on a missing
// object, with cause as the underlying error. It keeps the status, request
// id and code of the answer. Any other err is returned as is.
func MissingAsPrecondition(err, cause error) error {
	var oe *Error
	if !errors.As(err, &oe) {
		return err
	}
	pe := *oe
	pe.Kind = ErrPrecondition
	pe.Err = cause
	return &pe
}

// DeleteErr is what Delete returns for err, the driver's error of a
// delete request (nil when it succeeded): a missing object is success,
// unless the delete was conditional (ifVersion set), which makes it the
// ErrPrecondition of MissingAsPrecondition with cause. A missing bucket
// and every other error are returned as is.
func DeleteErr(err error, ifVersion string, cause error) error {
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrNoBucket) {
		return err
	}
	if ifVersion != "" {
		return MissingAsPrecondition(err, cause)
	}
	return nil
}
