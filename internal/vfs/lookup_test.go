package vfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// countStore counts the metadata requests and reads sent to a Store;
// LISTs and HEADs take delay (a store's latency: concurrent lookups
// overlap as they would over a network).
type countStore struct {
	objstore.Store
	delay               time.Duration
	lists, stats, reads atomic.Int64
}

func (s *countStore) List(ctx context.Context, o objstore.ListOptions) (objstore.ListPage, error) {
	s.lists.Add(1)
	time.Sleep(s.delay)
	return s.Store.List(ctx, o)
}

func (s *countStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	s.stats.Add(1)
	time.Sleep(s.delay)
	return s.Store.Stat(ctx, key)
}

func (s *countStore) NewReader(ctx context.Context, key string, off, n int64, o objstore.ReadOptions) (objstore.Reader, error) {
	s.reads.Add(1)
	return s.Store.NewReader(ctx, key, off, n, o)
}

// requests returns the LISTs, HEADs and GETs so far and resets the counts.
func (s *countStore) requests() (lists, stats, reads int64) {
	return s.lists.Swap(0), s.stats.Swap(0), s.reads.Swap(0)
}

// lookupEnv is an FS over one counted mem bucket, s3://bkt.
type lookupEnv struct {
	t  *testing.T
	fs *FS
	wb *writeback.Manager
	st *countStore
}

func newLookupEnv(t *testing.T) *lookupEnv {
	t.Helper()
	st := &countStore{Store: mem.New(mem.Options{Bucket: "bkt"})}
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			return st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	fs, wb := newTestFS(t, resolve, 100000, 64<<20)
	return &lookupEnv{t: t, wb: wb, st: st, fs: fs}
}

// seed stores n objects d/fNNNNN of 10 bytes directly in the bucket.
func (e *lookupEnv) seed(d string, n int) {
	e.t.Helper()
	for i := range n {
		body := []byte("0123456789")
		if _, err := e.st.Store.Put(context.Background(), fmt.Sprintf("%s/f%05d", d, i), bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// stat runs Getattr and returns its errno (0 on success).
func (e *lookupEnv) stat(p string) error {
	_, err := e.fs.Getattr(context.Background(), p)
	return err
}

// TestLookupStormListsOnce: stats of every name of a directory (and of
// names it lacks), with no readdir first, one at a time or all at once,
// cost the listing's pages plus the few requests before the directory
// counts as looked up often, not a request per name.
func TestLookupStormListsOnce(t *testing.T) {
	const n, missing = 2500, 300 // 3 pages of 1,000
	tests := []struct {
		name     string
		parallel int
	}{
		{"sequential", 1},
		{"parallel", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newLookupEnv(t)
			e.seed("d", n)
			if err := e.stat("s3/bkt"); err != nil { // the bucket check
				t.Fatal(err)
			}
			e.st.delay = 2 * time.Millisecond
			e.st.requests()
			names := make(chan string, n+missing)
			for i := range n {
				names <- fmt.Sprintf("s3/bkt/d/f%05d", i)
			}
			for i := range missing {
				names <- fmt.Sprintf("s3/bkt/d/none%d", i)
			}
			close(names)
			var wg sync.WaitGroup
			var bad atomic.Int64
			for range tt.parallel {
				wg.Go(func() {
					for p := range names {
						err := e.stat(p)
						if want := filepath.Base(p)[0] == 'f'; (err == nil) != want {
							t.Errorf("stat %s: %v", p, err)
							bad.Add(1)
						}
					}
				})
			}
			wg.Wait()
			lists, stats, _ := e.st.requests()
			// 3 lookups before the 4th lists the directory (a LIST
			// and a HEAD each), then the 3 pages of one listing.
			const limit = 2*3 + 3
			if lists+stats > limit || bad.Load() > 0 {
				t.Errorf("%d stats: %d LISTs + %d HEADs, want at most %d requests", n+missing, lists, stats, limit)
			}
		})
	}
}

// TestLookupFromListing: after a readdir, lookups and opens of listed
// names need no request (size and version come from the listing), and a
// name the listing lacks is ENOENT without a request.
func TestLookupFromListing(t *testing.T) {
	e := newLookupEnv(t)
	e.seed("d", 50)
	if _, err := e.fs.Readdir(context.Background(), "s3/bkt/d"); err != nil {
		t.Fatal(err)
	}
	e.st.requests()
	for i := range 50 {
		a, err := e.fs.Getattr(context.Background(), fmt.Sprintf("s3/bkt/d/f%05d", i))
		if err != nil || a.Size != 10 || a.Version == "" {
			t.Fatalf("stat f%05d: %+v, %v", i, a, err)
		}
	}
	if err := e.stat("s3/bkt/d/nothere"); err != syscall.ENOENT {
		t.Errorf("stat of a name not listed: %v, want ENOENT", err)
	}
	h, err := e.fs.Open(context.Background(), "s3/bkt/d/f00007", OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := h.Read(context.Background(), buf, 0)
	if (err != nil && err != io.EOF) || string(buf[:n]) != "0123456789" {
		t.Errorf("read: %q, %v", buf[:n], err)
	}
	h.Release()
	if lists, stats, reads := e.st.requests(); lists+stats > 0 || reads != 1 {
		t.Errorf("lookups and an open from a listing: %d LISTs, %d HEADs, %d GETs; want one GET", lists, stats, reads)
	}
}

// TestLookupListingInvalidation: names created, renamed and removed
// through the FS show at once in a cached listing and in lookups served
// from it; once uploaded, lookups of created names list the directory
// again (one listing for all of them, not a HEAD each).
func TestLookupListingInvalidation(t *testing.T) {
	e := newLookupEnv(t)
	ctx := context.Background()
	e.seed("d", 20)
	if _, err := e.fs.Readdir(ctx, "s3/bkt/d"); err != nil {
		t.Fatal(err)
	}
	h, err := e.fs.Create(ctx, "s3/bkt/d/new", 0o644, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write([]byte("fresh"), 0); err != nil {
		t.Fatal(err)
	}
	h.Release()
	steps := []struct {
		name string
		op   func() error
		want map[string]error // path -> Getattr result
	}{
		{"create", nil, map[string]error{"d/new": nil, "d/f00001": nil}},
		{"rename", func() error { return e.fs.Rename(ctx, "s3/bkt/d/f00001", "s3/bkt/d/moved", RenameFlags{}) },
			map[string]error{"d/f00001": syscall.ENOENT, "d/moved": nil}},
		{"unlink", func() error { return e.fs.Unlink(ctx, "s3/bkt/d/f00002") },
			map[string]error{"d/f00002": syscall.ENOENT}},
		{"rename dirty", func() error { return e.fs.Rename(ctx, "s3/bkt/d/new", "s3/bkt/d/new2", RenameFlags{}) },
			map[string]error{"d/new": syscall.ENOENT, "d/new2": nil}},
	}
	for _, s := range steps {
		if s.op != nil {
			if err := s.op(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
		for p, want := range s.want {
			if err := e.stat("s3/bkt/" + p); err != want {
				t.Errorf("after %s: stat %s = %v, want %v", s.name, p, err, want)
			}
		}
		names, err := e.fs.Readdir(ctx, "s3/bkt/d")
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, d := range names {
			listed[d.Name] = true
		}
		for p, want := range s.want {
			if listed[filepath.Base(p)] != (want == nil) {
				t.Errorf("after %s: readdir lists %s: %v", s.name, p, listed[filepath.Base(p)])
			}
		}
	}

	// Created names, uploaded: this mount's uploads complete the listing,
	// which answers for all of them without a request.
	for i := range 30 {
		h, err := e.fs.Create(ctx, fmt.Sprintf("s3/bkt/d/c%02d", i), 0o644, OpenFlags{Write: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write([]byte("created"), 0); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	old := relistAfter
	relistAfter = 0
	defer func() { relistAfter = old }()
	e.st.requests()
	for i := range 30 {
		a, err := e.fs.Getattr(ctx, fmt.Sprintf("s3/bkt/d/c%02d", i))
		if err != nil || a.Size != 7 || a.Version == "" {
			t.Fatalf("stat c%02d after upload: %+v, %v", i, a, err)
		}
	}
	if _, err := e.fs.Readdir(ctx, "s3/bkt/d"); err != nil {
		t.Fatal(err)
	}
	if lists, stats, _ := e.st.requests(); lists != 0 || stats != 0 {
		t.Errorf("stats and a readdir of 30 uploaded names: %d LISTs, %d HEADs; want none", lists, stats)
	}
}

// TestCreatedListingCompleted: a listing holding names created through
// the mount answers with what the bucket holds once they are uploaded
// (size, version), also after a rewrite, and falls back to a LIST when
// this mount did not upload the name (a rename copies in the bucket) or
// an upload that landed before the name was made again.
func TestCreatedListingCompleted(t *testing.T) {
	ctx := context.Background()
	write := func(t *testing.T, e *lookupEnv, p string, body string, flags OpenFlags) {
		t.Helper()
		var h *Handle
		var err error
		if flags.Trunc {
			h, err = e.fs.Open(ctx, p, flags)
		} else {
			h, err = e.fs.Create(ctx, p, 0o644, flags)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write([]byte(body), 0); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	drain := func(t *testing.T, e *lookupEnv) {
		t.Helper()
		if err := e.wb.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		run       func(t *testing.T, e *lookupEnv)
		path      string
		size      int64
		wantLists int64
	}{
		{"uploaded once", func(t *testing.T, e *lookupEnv) {
			write(t, e, "s3/bkt/d/a", "12345", OpenFlags{Write: true})
			drain(t, e)
		}, "s3/bkt/d/a", 5, 0},
		{"rewritten, uploaded twice", func(t *testing.T, e *lookupEnv) {
			write(t, e, "s3/bkt/d/a", "12345", OpenFlags{Write: true})
			drain(t, e)
			if err := e.stat("s3/bkt/d/a"); err != nil { // completes the entry
				t.Fatal(err)
			}
			write(t, e, "s3/bkt/d/a", "1234567890", OpenFlags{Write: true, Trunc: true})
			drain(t, e)
		}, "s3/bkt/d/a", 10, 0},
		{"renamed after upload", func(t *testing.T, e *lookupEnv) {
			write(t, e, "s3/bkt/d/a", "123", OpenFlags{Write: true})
			drain(t, e)
			if err := e.fs.Rename(ctx, "s3/bkt/d/a", "s3/bkt/d/b", RenameFlags{}); err != nil {
				t.Fatal(err)
			}
		}, "s3/bkt/d/b", 3, 1}, // a server-side copy: not an upload of this mount
		{"uploaded file renamed onto an uploaded name", func(t *testing.T, e *lookupEnv) {
			write(t, e, "s3/bkt/d/a", "12345", OpenFlags{Write: true})
			write(t, e, "s3/bkt/d/b", "1234567", OpenFlags{Write: true})
			drain(t, e)
			if err := e.stat("s3/bkt/d/a"); err != nil {
				t.Fatal(err)
			}
			if err := e.fs.Rename(ctx, "s3/bkt/d/b", "s3/bkt/d/a", RenameFlags{}); err != nil {
				t.Fatal(err)
			}
		}, "s3/bkt/d/a", 7, 1},
		{"dirty file renamed onto an uploaded name", func(t *testing.T, e *lookupEnv) {
			write(t, e, "s3/bkt/d/a", "12345", OpenFlags{Write: true})
			drain(t, e)
			if err := e.stat("s3/bkt/d/a"); err != nil {
				t.Fatal(err)
			}
			write(t, e, "s3/bkt/d/b", "1234567", OpenFlags{Write: true})
			if err := e.fs.Rename(ctx, "s3/bkt/d/b", "s3/bkt/d/a", RenameFlags{}); err != nil {
				t.Fatal(err)
			}
			drain(t, e)
		}, "s3/bkt/d/a", 7, -1}, // a LIST or not, as the upload raced the rename
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newLookupEnv(t)
			if err := e.fs.Mkdir(ctx, "s3/bkt/d"); err != nil {
				t.Fatal(err)
			}
			tt.run(t, e)
			e.st.requests()
			ents, err := e.fs.Readdir(ctx, "s3/bkt/d")
			if err != nil || len(ents) != 1 {
				t.Fatalf("readdir: %v, %v; want one name", ents, err)
			}
			a, err := e.fs.Getattr(ctx, tt.path)
			if err != nil || a.Size != tt.size || a.Version == "" {
				t.Fatalf("stat %s: %+v, %v; want size %d and a version", tt.path, a, err, tt.size)
			}
			info, err := e.st.Store.Stat(ctx, strings.TrimPrefix(tt.path, "s3/bkt/"))
			if err != nil || info.Version != a.Version {
				t.Errorf("stat %s: version %q, the bucket's %q (%v)", tt.path, a.Version, info.Version, err)
			}
			if lists, _, _ := e.st.requests(); tt.wantLists >= 0 && lists != tt.wantLists {
				t.Errorf("%d LISTs, want %d", lists, tt.wantLists)
			}
		})
	}
}
