package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

const testRequestID = "REQ-4242"

// cannedServer answers every request with status and, except for HEAD, an
// S3 XML error document with code.
func cannedServer(t *testing.T, status int, code string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-amz-request-id", testRequestID)
		w.Header().Set("x-amz-id-2", "host-id")
		if r.Method == http.MethodHead || code == "" {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>canned %s</Message><Resource>/bkt/key</Resource><RequestId>%s</RequestId><HostId>host-id</HostId></Error>`,
			code, code, testRequestID)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// testStore returns a store for bucket "bkt" at endpoint with static
// credentials.
func testStore(t *testing.T, endpoint string, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{Bucket: "bkt", Endpoint: endpoint, Region: "us-east-1", AccessKeyID: "AKIDTEST", SecretAccessKey: "secret"}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeOps calls each Store operation once on key "key" (Copy from it).
func storeOps(s *Store) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Stat": func(ctx context.Context) error { _, err := s.Stat(ctx, "key"); return err },
		"NewReader": func(ctx context.Context) error {
			r, err := s.NewReader(ctx, "key", 0, -1, objstore.ReadOptions{})
			if err == nil {
				r.Close()
			}
			return err
		},
		"List": func(ctx context.Context) error {
			_, err := s.List(ctx, objstore.ListOptions{Prefix: "key"})
			return err
		},
		"Put": func(ctx context.Context) error {
			_, err := s.Put(ctx, "key", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{})
			return err
		},
		"Copy": func(ctx context.Context) error {
			_, err := s.Copy(ctx, "key", "dst", objstore.CopyOptions{})
			return err
		},
		"CreateUpload": func(ctx context.Context) error {
			_, err := s.CreateUpload(ctx, "key", objstore.PutOptions{})
			return err
		},
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		status int
		code   string
		want   error // nil: no sentinel
	}{
		{status: 404, code: "NoSuchKey", want: objstore.ErrNotFound},
		{status: 404, code: "NoSuchBucket", want: objstore.ErrNoBucket},
		{status: 400, code: "InvalidBucketName", want: objstore.ErrNoBucket},
		{status: 404, code: "NoSuchUpload", want: objstore.ErrNotFound},
		{status: 412, code: "PreconditionFailed", want: objstore.ErrPrecondition},
		{status: 409, code: "ConditionalRequestConflict", want: objstore.ErrPrecondition},
		{status: 409, code: "OperationAborted", want: nil},
		{status: 403, code: "AccessDenied", want: objstore.ErrPermission},
		{status: 403, code: "InvalidAccessKeyId", want: objstore.ErrPermission},
		{status: 403, code: "SignatureDoesNotMatch", want: objstore.ErrPermission},
		{status: 503, code: "SlowDown", want: objstore.ErrThrottled},
		{status: 429, code: "TooManyRequests", want: objstore.ErrThrottled},
		{status: 400, code: "ThrottlingException", want: objstore.ErrThrottled},
		{status: 501, code: "NotImplemented", want: objstore.ErrUnsupported},
		{status: 500, code: "InternalError", want: nil},
		{status: 503, code: "ServiceUnavailable", want: nil},
		{status: 400, code: "InvalidArgument", want: nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%s", tt.status, tt.code), func(t *testing.T) {
			s := testStore(t, cannedServer(t, tt.status, tt.code).URL, nil)
			ops := storeOps(s)
			for _, op := range []string{"NewReader", "List", "Put", "CreateUpload"} {
				err := ops[op](context.Background())
				checkError(t, op, err, errorWant{status: tt.status, code: tt.code, kind: tt.want})
			}
		})
	}
}

// TestErrorMappingHead checks HEAD answers, which have no body: the status
// alone decides.
func TestErrorMappingHead(t *testing.T) {
	tests := []struct {
		status int
		want   error
	}{
		{status: 404, want: objstore.ErrNotFound},
		{status: 412, want: objstore.ErrPrecondition},
		{status: 403, want: objstore.ErrPermission},
		{status: 429, want: objstore.ErrThrottled},
		{status: 501, want: objstore.ErrUnsupported},
		{status: 500, want: nil},
		{status: 503, want: nil},
		{status: 400, want: nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			s := testStore(t, cannedServer(t, tt.status, "").URL, nil)
			_, err := s.Stat(context.Background(), "key")
			checkError(t, "Stat", err, errorWant{status: tt.status, kind: tt.want, anyCode: true})
			_, err = s.Copy(context.Background(), "key", "dst", objstore.CopyOptions{})
			checkError(t, "Copy", err, errorWant{status: tt.status, kind: tt.want, anyCode: true})
		})
	}
}

func TestDeleteErrors(t *testing.T) {
	tests := []struct {
		status int
		code   string
		want   error // nil: Delete succeeds
	}{
		{status: 404, code: "NoSuchKey", want: nil},
		{status: 404, code: "NoSuchBucket", want: objstore.ErrNoBucket},
		{status: 403, code: "AccessDenied", want: objstore.ErrPermission},
		{status: 503, code: "SlowDown", want: objstore.ErrThrottled},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			s := testStore(t, cannedServer(t, tt.status, tt.code).URL, nil)
			err := s.Delete(context.Background(), "key", objstore.DeleteOptions{})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Delete = %v, want nil", err)
				}
				return
			}
			checkError(t, "Delete", err, errorWant{status: tt.status, code: tt.code, kind: tt.want})
		})
	}
}

type errorWant struct {
	status  int
	code    string
	anyCode bool // HEAD errors: the SDK makes up a code from the status
	kind    error
}

// checkError checks that err is an *objstore.Error describing what the
// canned server said.
func checkError(t *testing.T, op string, err error, want errorWant) {
	t.Helper()
	var e *objstore.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T) is not an *objstore.Error", op, err, err)
	}
	if e.Provider != "s3" || e.Op != op || e.Bucket != "bkt" || e.Status != want.status || e.RequestID != testRequestID {
		t.Errorf("%s: error = {Provider %q Op %q Bucket %q Status %d RequestID %q}, want {s3 %s bkt %d %s}",
			op, e.Provider, e.Op, e.Bucket, e.Status, e.RequestID, op, want.status, testRequestID)
	}
	if e.Key != "key" && !(op == "List" && e.Key == "key") {
		t.Errorf("%s: Key = %q, want key", op, e.Key)
	}
	if !want.anyCode && e.Code != want.code {
		t.Errorf("%s: Code = %q, want %q", op, e.Code, want.code)
	}
	if e.Kind != want.kind && !(want.kind == nil && e.Kind == nil) {
		t.Errorf("%s: Kind = %v, want %v", op, e.Kind, want.kind)
	}
	if want.kind != nil && !errors.Is(err, want.kind) {
		t.Errorf("%s: errors.Is(err, %v) = false", op, want.kind)
	}
	if want.kind == objstore.ErrNoBucket && !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s: ErrNoBucket error does not wrap ErrNotFound", op)
	}
	if want.kind == nil && errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s: %v wraps ErrNotFound", op, err)
	}
	wantRetry := want.kind == objstore.ErrThrottled || (want.kind == nil && want.status >= 500)
	if got := objstore.Retryable(err); got != wantRetry {
		t.Errorf("%s: Retryable = %v, want %v", op, got, wantRetry)
	}
}

// TestTransportErrorsAreNotNotFound: no answer from S3 must never look like
// a missing object.
func TestTransportErrorsAreNotNotFound(t *testing.T) {
	done := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(done) }) // runs first: releases the handlers
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // nothing listens there any more

	tests := []struct {
		name     string
		endpoint string
	}{
		{name: "connection refused", endpoint: closedURL},
		{name: "no such host", endpoint: "http://ferry-no-such-host.invalid"},
		{name: "response timeout", endpoint: hang.URL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testStore(t, tt.endpoint, func(c *Config) { c.RequestTimeout = 200 * time.Millisecond })
			for op, call := range storeOps(s) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := call(ctx)
				cancel()
				var e *objstore.Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: error %v is not an *objstore.Error", op, err)
				}
				if errors.Is(err, objstore.ErrNotFound) || e.Kind != nil || e.Status != 0 {
					t.Errorf("%s: error = %v (Kind %v, Status %d), want a transport error without sentinel", op, err, e.Kind, e.Status)
				}
				if !objstore.Retryable(err) {
					t.Errorf("%s: transport error %v is not retryable", op, err)
				}
				if op == "Stat" {
					t.Logf("%s: %v", op, err)
				}
			}
		})
	}
}

// TestCredentialErrorsAreNotNotFound: the instance-metadata service
// answering 404 (no role attached) must not become ErrNotFound.
func TestCredentialErrorsAreNotNotFound(t *testing.T) {
	imds := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(imds.Close)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent/config")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)

	s3srv := cannedServer(t, 404, "NoSuchKey") // would say "not found" if reached
	s := testStore(t, s3srv.URL, func(c *Config) { c.AccessKeyID, c.SecretAccessKey = "", "" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Stat(ctx, "key")
	if err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat without credentials = %v, want a credentials error that is not ErrNotFound", err)
	}
	var e *objstore.Error
	if !errors.As(err, &e) || e.Status != 0 || e.Kind != nil {
		t.Fatalf("Stat without credentials = %#v, want an *objstore.Error without status or sentinel", err)
	}
	var ce *credentialsError
	if !errors.As(err, &ce) {
		t.Fatalf("Stat without credentials = %v, want a credentials error", err)
	}
	t.Log(err)
}

// TestErrorIn200: S3 can answer CopyObject and CompleteMultipartUpload with
// 200 and an error document; that is a server error, worth a retry.
func TestErrorIn200(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-amz-request-id", testRequestID)
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "10")
			w.Header().Set("ETag", `"v1"`)
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message><RequestId>%s</RequestId></Error>`, testRequestID)
	}))
	t.Cleanup(srv.Close)
	s := testStore(t, srv.URL, nil)
	_, err := s.Copy(context.Background(), "key", "dst", objstore.CopyOptions{})
	var e *objstore.Error
	if !errors.As(err, &e) || e.Code != "InternalError" || e.Status < 500 || e.Kind != nil {
		t.Fatalf("Copy = %#v, want InternalError with a 5xx status", err)
	}
	if !objstore.Retryable(err) {
		t.Errorf("an error in a 200 answer is not retryable: %v", err)
	}
}
