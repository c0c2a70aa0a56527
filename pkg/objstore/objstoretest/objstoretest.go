package objstoretest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Harness connects the suite to one driver.
type Harness struct {
	// NewStore returns a fresh, empty store for one subtest (a new bucket,
	// or a unique prefix of a shared one). It is called once per subtest and
	// should register its own cleanup with t.Cleanup; the suite does not
	// Close the store. Required.
	NewStore func(t *testing.T) objstore.Store
	// PendingUploads, when set, returns the number of multipart uploads in
	// progress in s (neither completed nor aborted), or -1 when unknown.
	// The multipart cases use it to check that Abort leaves nothing behind.
	PendingUploads func(t *testing.T, s objstore.Store) int
	// Timeout bounds each subtest's context; default 2 minutes.
	Timeout time.Duration
	// NoObjectPrefixCollision marks a backend that cannot hold an object
	// "a" beside objects under "a/" (MinIO stores objects as directories);
	// the listing cases then leave the object "a" out.
	NoObjectPrefixCollision bool
}

// HarnessFor returns the Harness of a driver's own test helpers, which take
// its concrete store type S: newStore opens a fresh store for one subtest
// (see Harness.NewStore) and pending, when not nil, counts its pending
// uploads (see Harness.PendingUploads).
func HarnessFor[S objstore.Store](newStore func(t *testing.T) S, pending func(t *testing.T, s S) int) Harness {
	h := Harness{NewStore: func(t *testing.T) objstore.Store { return newStore(t) }}
	if pending != nil {
		h.PendingUploads = func(t *testing.T, s objstore.Store) int { return pending(t, s.(S)) }
	}
	return h
}

// testCase is one named conformance check.
type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// env is what a case works with: the store under test and its context.
type env struct {
	h   Harness
	s   objstore.Store
	ctx context.Context
}

// Run runs every conformance case as a subtest of t, each on a fresh store
// from h.NewStore. Cases that need a capability the store lacks (Multipart,
// Caps.CopyPart, Caps.Metadata) log why and pass.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatal("objstoretest: Harness.NewStore is required")
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	var cases []testCase
	cases = append(cases, basicCases()...)
	cases = append(cases, rangeCases()...)
	cases = append(cases, listCases()...)
	cases = append(cases, preconditionCases()...)
	cases = append(cases, multipartCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			s := h.NewStore(t)
			if s == nil {
				t.Fatal("Harness.NewStore returned nil")
			}
			tc.run(t, &env{h: h, s: s, ctx: ctx})
		})
	}
}

// put stores data under key and fails the test on error.
func (e *env) put(t *testing.T, key string, data []byte, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := e.s.Put(e.ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
	if info.Size != int64(len(data)) {
		t.Errorf("Put(%q).Size = %d, want %d", key, info.Size, len(data))
	}
	if info.Version == "" {
		t.Errorf("Put(%q).Version is empty", key)
	}
	return info
}

// read returns key[off:off+length] and the reader's Info.
func (e *env) read(t *testing.T, key string, off, length int64, opts objstore.ReadOptions) ([]byte, objstore.ObjectInfo) {
	t.Helper()
	r, err := e.s.NewReader(e.ctx, key, off, length, opts)
	if err != nil {
		t.Fatalf("NewReader(%q, %d, %d): %v", key, off, length, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %q [%d, +%d): %v", key, off, length, err)
	}
	return b, r.Info()
}

// stat returns key's info and fails the test on error.
func (e *env) stat(t *testing.T, key string) objstore.ObjectInfo {
	t.Helper()
	info, err := e.s.Stat(e.ctx, key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return info
}

// wantMissing checks that key does not exist.
func (e *env) wantMissing(t *testing.T, key string) {
	t.Helper()
	if _, err := e.s.Stat(e.ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(%q) = %v, want an error wrapping ErrNotFound", key, err)
	}
}

// pending returns the harness's count of pending uploads, or -1.
func (e *env) pending(t *testing.T) int {
	t.Helper()
	if e.h.PendingUploads == nil {
		return -1
	}
	return e.h.PendingUploads(t, e.s)
}

// wantErrIs fails unless err wraps target.
func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error = %v, want one wrapping %v", what, err, target)
	}
}

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(seed uint64, n int64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := int64(0); i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}
