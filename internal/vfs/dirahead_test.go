package vfs

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// seedTree stores dirs directories tree/dNN with files objects each, and
// lists the bucket's root.
func (e *lookupEnv) seedTree(dirs, files int) {
	e.t.Helper()
	for d := range dirs {
		e.seed(fmt.Sprintf("tree/d%02d", d), files)
	}
	e.readdir("s3/bkt") // the bucket's existence is checked once
	e.st.requests()
}

// readdir lists p through the FS, failing the test on error.
func (e *lookupEnv) readdir(p string) int {
	e.t.Helper()
	ents, err := e.fs.Readdir(context.Background(), p)
	if err != nil {
		e.t.Fatalf("readdir %s: %v", p, err)
	}
	return len(ents)
}

// cached reports whether the listing of the bucket directory d is cached.
func (e *lookupEnv) cached(d string) bool {
	_, ok := e.fs.deps.Meta.List("s3/bkt/" + d)
	return ok
}

func TestWalkAhead(t *testing.T) {
	tests := []struct {
		name   string
		walk   []string // directories listed, in order
		listed []string // then cached without being listed
		not    []string // and not cached
	}{
		{
			name: "a walker's second sibling lists the next ones",
			walk: []string{"tree", "tree/d00", "tree/d01"},
			listed: []string{"tree/d02", "tree/d03", "tree/d04", "tree/d05",
				"tree/d06", "tree/d07", "tree/d08", "tree/d09"},
			not: []string{"tree/d10", "tree/d11"},
		},
		{
			name: "one ls of a subdirectory lists nothing more",
			walk: []string{"tree", "tree/d05"},
			not:  []string{"tree/d04", "tree/d06", "tree/d07"},
		},
		{
			name: "siblings apart are not a walk",
			walk: []string{"tree", "tree/d00", "tree/d02"},
			not:  []string{"tree/d03", "tree/d04"},
		},
		{
			name: "without the parent's listing, nothing",
			walk: []string{"tree/d00", "tree/d01"},
			not:  []string{"tree/d02"},
		},
		{
			name:   "the walk ahead stops at the last sibling",
			walk:   []string{"tree", "tree/d09", "tree/d10"},
			listed: []string{"tree/d11"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newLookupEnv(t)
			e.seedTree(12, 3)
			for _, d := range tc.walk {
				e.readdir("s3/bkt/" + d)
			}
			lists := int64(len(tc.walk))
			for _, d := range tc.listed {
				waitUntil(t, "walk-ahead listing of "+d, func() bool { return e.cached(d) })
			}
			e.fs.Close() // waits for the background listings
			for _, d := range tc.not {
				if e.cached(d) {
					t.Errorf("%s listed ahead; want not", d)
				}
			}
			if got, _, _ := e.st.requests(); got != lists+int64(len(tc.listed)) {
				t.Errorf("%d LISTs, want %d (the walk) + %d (ahead)", got, lists, len(tc.listed))
			}
			// The walker then finds what was listed ahead in the cache.
			for _, d := range tc.listed {
				if n := e.readdir("s3/bkt/" + d); n != 3 {
					t.Errorf("%s: %d entries, want 3", d, n)
				}
			}
			if got, _, _ := e.st.requests(); got != 0 {
				t.Errorf("walking on after the walk-ahead: %d LISTs, want 0", got)
			}
		})
	}
}

// TestWalkAheadClosed: after Close, a walk starts no listing.
func TestWalkAheadClosed(t *testing.T) {
	e := newLookupEnv(t)
	e.seedTree(4, 1)
	e.fs.Close()
	for _, d := range []string{"tree", "tree/d00", "tree/d01"} {
		e.readdir("s3/bkt/" + d)
	}
	time.Sleep(20 * time.Millisecond)
	if got, _, _ := e.st.requests(); got != 3 {
		t.Errorf("%d LISTs after Close, want 3 (the walk's own)", got)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
