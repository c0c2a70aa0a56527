package vfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// minioLike lists as MinIO does: no key below an object "a/…" is listed
// while the object "a" exists (a marker "a/" still is), though GETs and
// HEADs of them work. One page per listing.
type minioLike struct{ *mem.Store }

func (s minioLike) List(ctx context.Context, o objstore.ListOptions) (objstore.ListPage, error) {
	all, _, err := objstore.ListAll(ctx, s.Store, objstore.ListOptions{Prefix: o.Prefix})
	if err != nil {
		return objstore.ListPage{}, err
	}
	var page objstore.ListPage
	seen := map[string]bool{}
	for _, x := range all {
		hidden := false
		for i := 0; i < len(x.Key)-1; i++ { // a marker "a/" itself is listed
			if x.Key[i] == '/' {
				if _, err := s.Store.Stat(ctx, x.Key[:i]); err == nil {
					hidden = true
				}
			}
		}
		if hidden {
			continue
		}
		rest := strings.TrimPrefix(x.Key, o.Prefix)
		if i := strings.Index(rest, o.Delimiter); o.Delimiter != "" && i >= 0 {
			if pf := o.Prefix + rest[:i+1]; !seen[pf] {
				seen[pf] = true
				page.Prefixes = append(page.Prefixes, pf)
			}
			continue
		}
		page.Objects = append(page.Objects, x)
	}
	return page, nil
}

type layoutObj struct {
	key, body, ctype string
	md               map[string]string
}

// layoutStep is one look at the FS: what p is (want: "dir", "file",
// "enoent", "einval"), or for "ls" its names ("a/ b"), for "cat" its
// bytes; "remount" starts over with fresh caches; "rmdir" and "put"
// change things.
type layoutStep struct {
	op, p, want string
}

func TestLayouts(t *testing.T) {
	tests := []struct {
		name  string
		minio bool
		meta  bool // listings carry metadata (GCS, Azure); else as S3
		seed  []layoutObj
		steps []layoutStep
	}{
		{
			name: "object beside a prefix, listed first",
			seed: []layoutObj{{key: "p/a", body: "object a"}, {key: "p/a/b", body: "b"}},
			steps: []layoutStep{
				{"ls", "p", "a/"}, {"stat", "p/a", "dir"}, {"ls", "p/a", "b"}, {"cat", "p/a/b", "b"},
				{"remount", "", ""}, {"stat", "p/a", "dir"}, {"cat", "p/a/b", "b"}, {"ls", "p", "a/"},
			},
		},
		{
			name: "object beside a prefix, looked up first",
			meta: true,
			seed: []layoutObj{{key: "p/a/b", body: "b"}, {key: "p/a", body: "object a"}},
			steps: []layoutStep{
				{"stat", "p/a", "dir"}, {"cat", "p/a/b", "b"}, {"stat", "p/a/b", "file"}, {"ls", "p", "a/"},
			},
		},
		{
			name: "object stat'ed before the prefix appeared",
			seed: []layoutObj{{key: "p/a", body: "object a"}, {key: "p/z", body: "z"}},
			steps: []layoutStep{
				{"stat", "p/a", "file"}, {"put", "p/a/b", "b"}, {"ls", "p", "a/ z"}, {"stat", "p/a", "dir"}, {"cat", "p/a/b", "b"},
			},
		},
		{
			name: "hadoop folder markers are hidden",
			seed: []layoutObj{{key: "p/h_$folder$"}, {key: "p/h/x", body: "x"}, {key: "p/e_$folder$"}},
			steps: []layoutStep{
				{"ls", "p", "h/"}, {"stat", "p/h_$folder$", "enoent"}, {"stat", "p/h", "dir"}, {"cat", "p/h/x", "x"},
				{"remount", "", ""}, {"stat", "p/e_$folder$", "enoent"}, {"create", "p/new_$folder$", "einval"},
				{"mkdir", "p/new_$folder$", "einval"},
			},
		},
		{
			name: "s3fs directory objects",
			seed: []layoutObj{{key: "p/s", ctype: "application/x-directory"}, {key: "p/s/y", body: "y"},
				{key: "p/e", ctype: "application/x-directory; charset=UTF-8"}, {key: "p/f", ctype: "text/plain"}},
			steps: []layoutStep{
				{"stat", "p/e", "dir"}, {"stat", "p/s", "dir"}, {"ls", "p/s", "y"}, {"ls", "p/e", ""}, {"stat", "p/f", "file"},
				{"rmdir", "p/e", ""}, {"stat", "p/e", "enoent"}, {"remount", "", ""}, {"stat", "p/e", "enoent"},
				{"ls", "p", "f s/"},
			},
		},
		{
			name:  "s3fs directory objects, listed with metadata",
			meta:  true,
			seed:  []layoutObj{{key: "p/e", ctype: "application/x-directory"}, {key: "p/f"}},
			steps: []layoutStep{{"ls", "p", "e/ f"}, {"stat", "p/e", "dir"}, {"rmdir", "p/e", ""}, {"remount", "", ""}, {"ls", "p", "f"}},
		},
		{
			name:  "azure data lake directory blobs",
			meta:  true,
			seed:  []layoutObj{{key: "p/adl", md: map[string]string{"hdi_isfolder": "true"}}, {key: "p/adl/k", body: "k"}},
			steps: []layoutStep{{"stat", "p/adl", "dir"}, {"ls", "p", "adl/"}, {"cat", "p/adl/k", "k"}},
		},
		{
			name:  "minio: a marker shows the directory, names below are asked for",
			minio: true,
			seed:  []layoutObj{{key: "p/m/"}, {key: "p/m/x", body: "x"}, {key: "p/m", body: "object m"}},
			steps: []layoutStep{
				{"ls", "p", "m/"}, {"stat", "p/m", "dir"}, {"ls", "p/m", ""}, {"cat", "p/m/x", "x"}, {"stat", "p/m/none", "enoent"},
				{"remount", "", ""}, {"stat", "p/m", "dir"}, {"cat", "p/m/x", "x"},
			},
		},
		{
			name:  "minio: a directory object, names below asked for",
			minio: true,
			seed:  []layoutObj{{key: "p/s", ctype: "application/x-directory"}, {key: "p/s/y", body: "y"}},
			steps: []layoutStep{{"stat", "p/s", "dir"}, {"ls", "p/s", ""}, {"cat", "p/s/y", "y"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := mem.New(mem.Options{Bucket: "bkt", NoListMetadata: !tt.meta})
			var st objstore.Store = ms
			if tt.minio {
				st = minioLike{ms}
			}
			put := func(o layoutObj) {
				if _, err := ms.Put(context.Background(), o.key, strings.NewReader(o.body), int64(len(o.body)), objstore.PutOptions{ContentType: o.ctype, Metadata: o.md}); err != nil {
					t.Fatal(err)
				}
			}
			for _, o := range tt.seed {
				put(o)
			}
			resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
				if scheme == "s3" && bucket == "bkt" {
					return st, nil
				}
				return nil, objstore.ErrNoBucket
			}
			fs, _ := newTestFS(t, resolve, 10000, 64<<20)
			ctx := context.Background()
			for i, s := range tt.steps {
				p := "s3/bkt/" + s.p
				var got string
				switch s.op {
				case "remount":
					fs, _ = newTestFS(t, resolve, 10000, 64<<20)
					continue
				case "put":
					put(layoutObj{key: s.p, body: s.want})
					continue
				case "stat":
					a, err := fs.Getattr(ctx, p)
					got = kindWord(a, err)
				case "ls":
					ents, err := fs.Readdir(ctx, p)
					if err != nil {
						t.Fatalf("step %d: ls %s: %v", i, s.p, err)
					}
					var names []string
					for _, e := range ents {
						n := e.Name
						if e.Kind == KindDir {
							n += "/"
						}
						names = append(names, n)
					}
					sort.Strings(names)
					got = strings.Join(names, " ")
				case "cat": // a lookup first, as the kernel does
					if a, err := fs.Getattr(ctx, p); err != nil || a.Kind != KindFile {
						got = "lookup: " + kindWord(a, err)
					} else {
						got = catFS(t, fs, p)
					}
				case "rmdir":
					if err := fs.Rmdir(ctx, p); err != nil {
						t.Fatalf("step %d: rmdir %s: %v", i, s.p, err)
					}
					continue
				case "create":
					h, err := fs.Create(ctx, p, 0o644, OpenFlags{Write: true})
					if err == nil {
						h.Release()
					}
					got = kindWord(Attr{Kind: KindFile}, err)
				case "mkdir":
					got = kindWord(Attr{Kind: KindDir}, fs.Mkdir(ctx, p))
				}
				if got != s.want {
					t.Fatalf("step %d: %s %s = %q, want %q", i, s.op, s.p, got, s.want)
				}
			}
		})
	}
}

func kindWord(a Attr, err error) string {
	switch {
	case errIs(err, syscall.ENOENT):
		return "enoent"
	case errIs(err, syscall.EINVAL):
		return "einval"
	case err != nil:
		return err.Error()
	case a.Kind == KindDir:
		return "dir"
	}
	return "file"
}

func catFS(t *testing.T, fs *FS, p string) string {
	t.Helper()
	h, err := fs.Open(context.Background(), p, OpenFlags{})
	if err != nil {
		return fmt.Sprintf("open: %v", err)
	}
	defer h.Release()
	var buf bytes.Buffer
	b := make([]byte, 4096)
	for off := int64(0); ; {
		n, err := h.Read(context.Background(), b, off)
		buf.Write(b[:n])
		off += int64(n)
		if err != nil && err != io.EOF {
			return fmt.Sprintf("read: %v", err)
		}
		if n < len(b) {
			return buf.String()
		}
	}
}
