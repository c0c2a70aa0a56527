package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

func TestSplitPath(t *testing.T) {
	t.Setenv("PWD", "/fusion/s3/b/work")
	tests := []struct {
		path                string
		scheme, bucket, key string
		bad                 bool
	}{
		{path: "/fusion/s3/b/ref/x.fa", scheme: "s3", bucket: "b", key: "ref/x.fa"},
		{path: "/fusion/gs/b/ref/", scheme: "gs", bucket: "b", key: "ref"},
		{path: "/fusion/az/c", scheme: "az", bucket: "c", key: ""},
		{path: "/fusion/s3/b/ref/../idx/*.bai", scheme: "s3", bucket: "b", key: "idx/*.bai"},
		{path: "s3://b/ref/x.fa", scheme: "s3", bucket: "b", key: "ref/x.fa"},
		{path: "in/*.txt", scheme: "s3", bucket: "b", key: "work/in/*.txt"},
		{path: "/fusion", bad: true},
		{path: "/fusion/s3", bad: true},
		{path: "/fusionx/s3/b/k", bad: true},
		{path: "/data/s3/b/k", bad: true},
		{path: "/fusion/ftp/b/k", bad: true},
		{path: "/fusion/s3/b*/k", bad: true},
		{path: "http://b/k", bad: true},
	}
	for _, tt := range tests {
		s, b, k, err := splitPath("/fusion/", tt.path)
		if tt.bad {
			if err == nil {
				t.Errorf("splitPath(%q) = %s %s %s, want an error", tt.path, s, b, k)
			}
			continue
		}
		if err != nil || s != tt.scheme || b != tt.bucket || k != tt.key {
			t.Errorf("splitPath(%q) = %q %q %q %v, want %q %q %q", tt.path, s, b, k, err, tt.scheme, tt.bucket, tt.key)
		}
	}
}

func newBucket(t *testing.T, keys map[string]int) *mem.Store {
	t.Helper()
	st := mem.New(mem.Options{Bucket: "b"})
	for k, n := range keys {
		data := bytes.Repeat([]byte{byte(len(k))}, n)
		if _, err := st.Put(context.Background(), k, bytes.NewReader(data), int64(n), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestExpandKey(t *testing.T) {
	st := newBucket(t, map[string]int{
		"ref/a.fa": 10, "ref/b.fa": 20, "ref/a.fa.fai": 1, "ref/sub/c.fa": 5, "ref/sub/": 0,
		"refs/x.fa": 7, "top": 3, "dir/": 0, "d2/x": 1, "d2/y/z": 1,
	})
	tests := []struct {
		key      string
		want     []string
		notFound bool
		bad      bool
	}{
		{key: "top", want: []string{"top"}},
		{key: "ref", want: []string{"ref/a.fa", "ref/a.fa.fai", "ref/b.fa", "ref/sub/c.fa"}},
		{key: "ref/*.fa", want: []string{"ref/a.fa", "ref/b.fa"}},
		{key: "ref/?.fa*", want: []string{"ref/a.fa", "ref/a.fa.fai", "ref/b.fa"}},
		{key: "ref/[ab].fa", want: []string{"ref/a.fa", "ref/b.fa"}},
		{key: "ref/*", want: []string{"ref/a.fa", "ref/a.fa.fai", "ref/b.fa", "ref/sub/c.fa"}},
		{key: "ref*/*.fa", want: []string{"ref/a.fa", "ref/b.fa", "refs/x.fa"}},
		{key: "*/sub", want: []string{"ref/sub/c.fa"}},
		{key: "d2", want: []string{"d2/x", "d2/y/z"}},
		{key: "", want: []string{"d2/x", "d2/y/z", "ref/a.fa", "ref/a.fa.fai", "ref/b.fa", "ref/sub/c.fa", "refs/x.fa", "top"}},
		{key: "dir", notFound: true}, // only a marker: an empty directory
		{key: "nothing", notFound: true},
		{key: "ref/*.bam", notFound: true},
		{key: "ref/[", bad: true},
	}
	for _, tt := range tests {
		objs, err := expandKey(context.Background(), st, tt.key)
		switch {
		case tt.notFound:
			if !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("expandKey(%q): %v, want ErrNotFound", tt.key, err)
			}
			continue
		case tt.bad:
			if err == nil || errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("expandKey(%q): %v, want a pattern error", tt.key, err)
			}
			continue
		case err != nil:
			t.Errorf("expandKey(%q): %v", tt.key, err)
			continue
		}
		var got []string
		for _, o := range objs {
			got = append(got, o.Key)
		}
		slices.Sort(got)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("expandKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

// TestPrefetch warms a cache from a mem bucket through globs, a directory
// and a duplicate, then checks a new cache on the same directory holds
// every byte.
func TestPrefetch(t *testing.T) {
	keys := map[string]int{"ref/a.fa": 3<<20 + 5, "ref/b.fa": 1 << 20, "ref/notes.txt": 100, "idx/x.bai": 70_000, "other": 9}
	st := newBucket(t, keys)
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme != "s3" || bucket != "b" {
			return nil, fmt.Errorf("no bucket %s/%s: %w", scheme, bucket, objstore.ErrNoBucket)
		}
		return st, nil
	}
	cfg := config.Defaults()
	cfg.CacheDir = t.TempDir()
	cfg.CacheSize = 64 << 20
	rec := &recorder{}
	err := Prefetch(context.Background(), cfg,
		[]string{"/fusion/s3/b/ref/*.fa", "/fusion/s3/b/idx", "s3://b/ref/a.fa"},
		PrefetchOptions{Resolve: resolve, Progress: rec.report, Files: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ref/a.fa", "ref/b.fa", "idx/x.bai"}
	var total int64
	for _, k := range want {
		total += int64(keys[k])
	}
	got := rec.reports()
	last := got[len(got)-1]
	if !last.Final || last.Op != "prefetch" || last.Done != total || last.Total != total || last.Files != 3 || last.FilesTotal != 3 {
		t.Errorf("last report %+v, want all of %d bytes in 3 files", last, total)
	}

	c, err := block.New(block.Config{Dir: filepath.Join(cfg.CacheDir, "blocks"), MaxBytes: cfg.CacheSize})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for k, n := range keys {
		info, err := st.Stat(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		cached := c.Cached(block.Ref{Store: st, StoreID: "s3/b", Key: k, Version: info.Version, Size: info.Size})
		wantCached := int64(0)
		if slices.Contains(want, k) {
			wantCached = int64(n)
		}
		if cached != wantCached {
			t.Errorf("%s: %d bytes cached, want %d", k, cached, wantCached)
		}
	}

	// Errors: a missing path, and a bucket that does not exist.
	for _, p := range []string{"/fusion/s3/b/missing", "/fusion/s3/nob/k"} {
		if err := Prefetch(context.Background(), cfg, []string{p}, PrefetchOptions{Resolve: resolve}); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Prefetch(%s): %v, want ErrNotFound", p, err)
		}
	}
	if err := Prefetch(context.Background(), cfg, []string{"/elsewhere/x"}, PrefetchOptions{Resolve: resolve}); err == nil {
		t.Error("Prefetch outside the mount point succeeded")
	}
}
