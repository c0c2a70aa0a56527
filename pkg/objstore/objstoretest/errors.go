package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// This file holds the error-mapping checks of HTTP drivers: a driver
// answers every request of a store with one canned error (an httptest
// server) and checks that each operation returns the *objstore.Error with
// the right sentinel. The conformance suite cannot do this: it runs against
// servers that answer correctly.

// ErrorOp is one Store call whose error an error-mapping test checks.
type ErrorOp struct {
	// Name is the operation, as the *objstore.Error's Op must name it.
	Name string
	Call func(ctx context.Context, s objstore.Store) error
}

// ErrorOps returns Stat, NewReader, List, Put, Copy and Delete, each on key
// "k": List lists the top level with Delimiter "/", Copy copies to "k2",
// and Delete has IfVersion deleteVersion, so that a missing object is a
// precondition failure rather than a success.
func ErrorOps(deleteVersion string) []ErrorOp {
	return []ErrorOp{
		{Name: "Stat", Call: func(ctx context.Context, s objstore.Store) error { _, err := s.Stat(ctx, "k"); return err }},
		{Name: "NewReader", Call: func(ctx context.Context, s objstore.Store) error {
			r, err := s.NewReader(ctx, "k", 0, 10, objstore.ReadOptions{})
			if err == nil {
				r.Close()
			}
			return err
		}},
		{Name: "List", Call: func(ctx context.Context, s objstore.Store) error {
			_, err := s.List(ctx, objstore.ListOptions{Delimiter: "/"})
			return err
		}},
		{Name: "Put", Call: func(ctx context.Context, s objstore.Store) error {
			_, err := s.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{})
			return err
		}},
		{Name: "Copy", Call: func(ctx context.Context, s objstore.Store) error {
			_, err := s.Copy(ctx, "k", "k2", objstore.CopyOptions{})
			return err
		}},
		{Name: "Delete", Call: func(ctx context.Context, s objstore.Store) error {
			return s.Delete(ctx, "k", objstore.DeleteOptions{IfVersion: deleteVersion})
		}},
	}
}

// ErrorCase is one canned error answer and the sentinel that each
// operation's error must wrap.
type ErrorCase struct {
	Name string
	// Status is the answer's HTTP status; Code is the cloud's error code
	// in it. The *objstore.Error must carry both.
	Status int
	Code   string
	// Message is the answer's message, for drivers whose mapping reads it.
	Message string
	// Want is the sentinel that every operation's error wraps (nil: none).
	Want error
	// Except names the operations (by ErrorOp.Name) whose error wraps
	// another sentinel than Want (nil: none).
	Except map[string]error
}

// ErrorMapping is what a driver's error-mapping test checks its cases on.
type ErrorMapping struct {
	// Provider and Bucket are what the *objstore.Error must carry.
	Provider, Bucket string
	// Canned returns a store whose every request gets the answer of c,
	// with requestID as the cloud's request id. Required.
	Canned func(t *testing.T, c ErrorCase, requestID string) objstore.Store
	// Ops are the operations to check (usually ErrorOps).
	Ops []ErrorOp
}

// sentinels are the errors an error-mapping test checks with errors.Is.
var sentinels = []error{objstore.ErrNotFound, objstore.ErrNoBucket, objstore.ErrPrecondition,
	objstore.ErrPermission, objstore.ErrThrottled, objstore.ErrUnsupported}

// CheckErrorMapping runs each case as a subtest of t: on a store from
// m.Canned, every operation of m.Ops must fail with an *objstore.Error that
// carries the provider, operation, bucket, key (none for List), status,
// request id and code, wraps exactly the sentinels of the case's want (and
// those it wraps itself), and is retryable exactly when the status is 429
// or above.
func CheckErrorMapping(t *testing.T, m ErrorMapping, cases []ErrorCase) {
	t.Helper()
	if m.Canned == nil {
		t.Fatal("objstoretest: ErrorMapping.Canned is required")
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			reqID := "req-" + strconv.Itoa(tc.Status)
			s := m.Canned(t, tc, reqID)
			for _, op := range m.Ops {
				want, ok := tc.Except[op.Name]
				if !ok {
					want = tc.Want
				}
				err := op.Call(t.Context(), s)
				var oe *objstore.Error
				if !errors.As(err, &oe) {
					t.Fatalf("%s: error %v (%T) is no *objstore.Error", op.Name, err, err)
				}
				if oe.Provider != m.Provider || oe.Op != op.Name || oe.Bucket != m.Bucket || (oe.Key == "") != (op.Name == "List") {
					t.Errorf("%s: error fields {%q %q %q %q}", op.Name, oe.Provider, oe.Op, oe.Bucket, oe.Key)
				}
				if oe.Status != tc.Status || oe.RequestID != reqID || oe.Code != tc.Code {
					t.Errorf("%s: Status %d RequestID %q Code %q, want %d %q %q",
						op.Name, oe.Status, oe.RequestID, oe.Code, tc.Status, reqID, tc.Code)
				}
				for _, sen := range sentinels {
					wantIs := want != nil && errors.Is(want, sen)
					if errors.Is(err, sen) != wantIs {
						t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", op.Name, err, sen, !wantIs, wantIs)
					}
				}
				if retry := objstore.Retryable(err); retry != (tc.Status >= 429) {
					t.Errorf("%s: Retryable = %v for HTTP %d", op.Name, retry, tc.Status)
				}
			}
		})
	}
}

// CheckNetworkErrors checks that every operation of ops on s, a store
// whose endpoint refuses connections, fails with a transport error: an
// *objstore.Error without status or sentinel (never ErrNotFound), and
// retryable.
func CheckNetworkErrors(t *testing.T, s objstore.Store, ops []ErrorOp) {
	t.Helper()
	for _, op := range ops {
		err := op.Call(t.Context(), s)
		var oe *objstore.Error
		switch {
		case err == nil:
			t.Errorf("%s: succeeded against a closed port", op.Name)
		case errors.Is(err, objstore.ErrNotFound):
			t.Errorf("%s: %v wraps ErrNotFound", op.Name, err)
		case !errors.As(err, &oe) || oe.Status != 0 || oe.Kind != nil:
			t.Errorf("%s: %v: want an *objstore.Error without status or sentinel", op.Name, err)
		case !objstore.Retryable(err):
			t.Errorf("%s: %v is not retryable", op.Name, err)
		}
	}
}
