package objstore

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
)

// This file holds the multipart bookkeeping that drivers share (gcs and
// azure use it): upload IDs, and the parts and state of an upload in
// progress.

// uploadIDBytes is the number of random bytes of an upload ID.
const uploadIDBytes = 8

// NewUploadID returns a fresh random upload ID of 16 hex digits, for
// drivers that name a multipart upload's temporaries themselves.
func NewUploadID() (string, error) {
	var b [uploadIDBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidUploadID reports whether id has the form of a NewUploadID, so that
// a driver's AbortUpload never acts on names it did not make.
func ValidUploadID(id string) bool {
	if len(id) != 2*uploadIDBytes {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// UploadState is where a multipart upload is in its life.
type UploadState int

const (
	// UploadActive: parts may be added; the upload may be completed or
	// aborted.
	UploadActive UploadState = iota
	// UploadCompleted: Complete made the object.
	UploadCompleted
	// UploadAborted: Abort gave the upload up.
	UploadAborted
)

// String returns "active", "completed" or "aborted".
func (s UploadState) String() string {
	switch s {
	case UploadActive:
		return "active"
	case UploadCompleted:
		return "completed"
	case UploadAborted:
		return "aborted"
	}
	return "UploadState(" + strconv.Itoa(int(s)) + ")"
}

// UploadParts is the client-side record of a multipart upload: what the
// driver keeps per part number (a generation, a size…) and the upload's
// state. The zero value is an active upload without parts. It is safe for
// concurrent use.
type UploadParts[T any] struct {
	// mu guards parts and state.
	mu    sync.Mutex
	parts map[int]T
	state UploadState
}

// State returns the upload's state.
func (u *UploadParts[T]) State() UploadState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state
}

// Set records part n (replacing an earlier part n).
func (u *UploadParts[T]) Set(n int, v T) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.parts == nil {
		u.parts = make(map[int]T)
	}
	u.parts[n] = v
}

// Parts returns, in one step, the upload's state and, when it is active,
// the part numbers in ascending order and a copy of what was recorded for
// them.
func (u *UploadParts[T]) Parts() (UploadState, []int, map[int]T) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state != UploadActive {
		return u.state, nil, nil
	}
	parts := make(map[int]T, len(u.parts))
	nums := make([]int, 0, len(u.parts))
	for n, v := range u.parts {
		parts[n] = v
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return u.state, nums, parts
}

// Finish moves an active upload to state and returns the state it was in
// before (a finished upload keeps its state).
func (u *UploadParts[T]) Finish(state UploadState) UploadState {
	u.mu.Lock()
	defer u.mu.Unlock()
	prev := u.state
	if prev == UploadActive {
		u.state = state
	}
	return prev
}
