package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// metaCounter counts the LISTs and HEADs sent to a Store.
type metaCounter struct {
	objstore.Store
	lists, stats atomic.Int64
}

func (s *metaCounter) List(ctx context.Context, o objstore.ListOptions) (objstore.ListPage, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, o)
}

func (s *metaCounter) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	s.stats.Add(1)
	return s.Store.Stat(ctx, key)
}

// requests returns the LISTs and HEADs so far and resets the counts.
func (s *metaCounter) requests() (lists, stats int64) { return s.lists.Swap(0), s.stats.Swap(0) }

// mountCounted mounts a vfs over st as s3/bkt and returns the bucket's
// directory on the mount and the writeback manager.
func mountCounted(t *testing.T, st objstore.Store) (string, *writeback.Manager) {
	root, wb, _ := mountStore(t, st, meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: 5 * time.Second, MaxEntries: 100000})
	return root, wb
}

// TestLookupStormThroughMount: lstat of every name of a directory of
// 2,500 objects (and of 200 names it lacks) through the kernel, with no
// readdir first, costs the listing's 3 pages plus the few lookups before
// the directory counts as looked up often, not a request per name.
func TestLookupStormThroughMount(t *testing.T) {
	const n, missing = 2500, 200
	st := &metaCounter{Store: mem.New(mem.Options{Bucket: "bkt"})}
	for i := range n {
		if _, err := st.Store.Put(context.Background(), fmt.Sprintf("d/f%05d", i), bytes.NewReader([]byte("abc")), 3, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := mountCounted(t, st)
	if _, err := os.Stat(root); err != nil { // the bucket check
		t.Fatal(err)
	}
	st.requests()
	for i := range n {
		if fi, err := os.Lstat(filepath.Join(root, "d", fmt.Sprintf("f%05d", i))); err != nil || fi.Size() != 3 {
			t.Fatalf("lstat f%05d: %v", i, err)
		}
	}
	for i := range missing {
		if _, err := os.Lstat(filepath.Join(root, "d", fmt.Sprintf("none%d", i))); !os.IsNotExist(err) {
			t.Fatalf("lstat of a missing name: %v", err)
		}
	}
	lists, stats := st.requests()
	t.Logf("%d lstats: %d LISTs, %d HEADs", n+missing, lists, stats)
	// d itself, 3 lookups in d (a LIST and a HEAD each), 3 pages.
	if lists+stats > 2+2*3+3 {
		t.Errorf("%d lstats cost %d LISTs + %d HEADs, want O(pages)", n+missing, lists, stats)
	}
}

// TestListingInvalidationThroughMount: once a directory's listing is
// cached, names created, renamed and removed through the mount show (or
// go) at once, in stat and in readdir.
func TestListingInvalidationThroughMount(t *testing.T) {
	st := &metaCounter{Store: mem.New(mem.Options{Bucket: "bkt"})}
	for _, k := range []string{"d/a", "d/b", "d/c"} {
		if _, err := st.Store.Put(context.Background(), k, bytes.NewReader([]byte("abc")), 3, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := mountCounted(t, st)
	d := filepath.Join(root, "d")
	if _, err := os.ReadDir(d); err != nil { // the listing is cached
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		op      func() error
		present []string
		absent  []string
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(d, "new"), []byte("x"), 0o644) }, []string{"new", "a"}, nil},
		{"rename", func() error { return os.Rename(filepath.Join(d, "a"), filepath.Join(d, "a2")) }, []string{"a2"}, []string{"a"}},
		{"unlink", func() error { return os.Remove(filepath.Join(d, "b")) }, nil, []string{"b"}},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(d, "sub"), 0o755) }, []string{"sub"}, nil},
		{"rename dir", func() error { return os.Rename(filepath.Join(d, "sub"), filepath.Join(d, "sub2")) }, []string{"sub2"}, []string{"sub"}},
		{"rmdir", func() error { return os.Remove(filepath.Join(d, "sub2")) }, nil, []string{"sub2"}},
		{"recreate", func() error { return os.WriteFile(filepath.Join(d, "b"), []byte("again"), 0o644) }, []string{"b"}, nil},
	}
	for _, s := range steps {
		if err := s.op(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, e := range ents {
			listed[e.Name()] = true
		}
		for _, name := range s.present {
			if _, err := os.Lstat(filepath.Join(d, name)); err != nil || !listed[name] {
				t.Errorf("after %s: %s: lstat %v, listed %v", s.name, name, err, listed[name])
			}
		}
		for _, name := range s.absent {
			if _, err := os.Lstat(filepath.Join(d, name)); !os.IsNotExist(err) || listed[name] {
				t.Errorf("after %s: %s still there: lstat %v, listed %v", s.name, name, err, listed[name])
			}
		}
	}
}
