package objstore

import (
	"context"
	"errors"
	"fmt"
)

var errCanceled = context.Canceled

// Sentinel errors. Drivers wrap them; callers test with errors.Is.
var (
	ErrNotFound     = errors.New("object not found")
	ErrPrecondition = errors.New("precondition failed")
	ErrPermission   = errors.New("permission denied")
	ErrThrottled    = errors.New("request throttled")
	ErrUnsupported  = errors.New("operation not supported by backend")
	// ErrNoBucket is returned when the bucket or container does not exist;
	// it also wraps ErrNotFound.
	ErrNoBucket = fmt.Errorf("bucket does not exist: %w", ErrNotFound)
)

// Error is a failed backend request. It carries what a user needs to find
// the request in the cloud's logs, and never a credential.
type Error struct {
	Provider  string // "s3", "gs", "az", "mem"
	Op        string // "Stat", "NewReader", "List", "Put", "Copy", "Delete", "UploadPart", …
	Bucket    string
	Key       string
	Status    int    // HTTP status, 0 when none was received
	RequestID string // the cloud's request id, when known
	Code      string // the cloud's error code, when known (e.g. "NoSuchKey")
	Kind      error  // one of the sentinels, or nil for other errors
	Err       error  // the underlying error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s %s/%s", e.Provider, e.Op, e.Bucket, e.Key)
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.RequestID != "" {
		s += " (request id " + e.RequestID + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap lets errors.Is see both the sentinel and the cause.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Retryable reports whether err is worth retrying: throttling, 5xx, 408,
// timeouts and transport failures. Not found, precondition, permission,
// unsupported and context cancellation are final. An error with a 2xx
// status is a success answer broken in transit (a body cut short, a
// document that does not parse): a transport failure, so retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrThrottled) {
		return true
	}
	for _, final := range []error{ErrNotFound, ErrPrecondition, ErrPermission, ErrUnsupported, errCanceled} {
		if errors.Is(err, final) {
			return false
		}
	}
	var e *Error
	if errors.As(err, &e) && e.Status != 0 {
		return e.Status >= 500 || e.Status == 408 || e.Status == 429 ||
			(e.Status >= 200 && e.Status < 300)
	}
	return true // transport and unknown errors
}
