package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestRetryable pins down which failures are worth another attempt.
func TestRetryable(t *testing.T) {
	berr := func(status int, kind, err error) error {
		return &Error{Provider: "s3", Op: "List", Bucket: "b", Status: status, Kind: kind, Err: err}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not found", berr(404, ErrNotFound, errors.New("NoSuchKey")), false},
		{"precondition", berr(412, ErrPrecondition, errors.New("PreconditionFailed")), false},
		{"permission", berr(403, ErrPermission, errors.New("AccessDenied")), false},
		{"unsupported", berr(501, ErrUnsupported, errors.New("NotImplemented")), false},
		{"bad request", berr(400, nil, errors.New("InvalidArgument")), false},
		{"canceled", fmt.Errorf("list: %w", context.Canceled), false},
		{"throttled 503", berr(503, ErrThrottled, errors.New("SlowDown")), true},
		{"throttled 400", berr(400, ErrThrottled, errors.New("ThrottlingException")), true},
		{"internal 500", berr(500, nil, errors.New("InternalError")), true},
		{"timeout 408", berr(408, nil, errors.New("RequestTimeout")), true},
		{"429", berr(429, nil, errors.New("TooManyRequests")), true},
		{"200 body cut", berr(200, nil, io.ErrUnexpectedEOF), true},
		{"200 body unparsable", berr(200, nil, errors.New("deserialization failed")), true},
		{"206 body cut", berr(206, nil, io.ErrUnexpectedEOF), true},
		{"transport", berr(0, nil, errors.New("connection reset by peer")), true},
		{"unknown", errors.New("boom"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Retryable(tt.err); got != tt.want {
				t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
