package objstoretest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func listCases() []testCase {
	return []testCase{
		{name: "ListDelimiter", run: testListDelimiter},
		{name: "ListPagination", run: testListPagination},
		{name: "ListEmpty", run: testListEmpty},
		{name: "ListVersionMatchesStat", run: testListVersion},
		{name: "ListMetadata", run: testListMetadata},
	}
}

// testListMetadata: a store whose Caps say ListMetadata lists each
// object with the user metadata Stat returns.
func testListMetadata(t *testing.T, e *env) {
	if !e.s.Caps().ListMetadata {
		t.Log("Caps().ListMetadata is false: case not applicable")
		return
	}
	md := map[string]string{"ferry-mode": "10644", "x-other": "v"}
	e.put(t, "lm/k", []byte("x"), objstore.PutOptions{Metadata: md})
	e.put(t, "lm/d/", nil, objstore.PutOptions{Metadata: md})
	page, err := e.s.List(e.ctx, objstore.ListOptions{Prefix: "lm/", Delimiter: "/"})
	if err != nil || len(page.Objects) != 1 {
		t.Fatalf("List: %v %v", page.Objects, err)
	}
	if got := page.Objects[0].Metadata; !maps.Equal(got, md) {
		t.Errorf("listed metadata %v, want %v", got, md)
	}
	page, err = e.s.List(e.ctx, objstore.ListOptions{Prefix: "lm/d/", Delimiter: "/"})
	if err != nil || len(page.Objects) != 1 || !maps.Equal(page.Objects[0].Metadata, md) {
		t.Errorf("List of a marker: %v %v", page.Objects, err)
	}
}

// testListVersion: a listing and a Stat give the same Version, and a read
// conditional on the listed Version succeeds (callers open files with the
// version a listing returned).
func testListVersion(t *testing.T, e *env) {
	e.put(t, "v/k", []byte("versioned"), objstore.PutOptions{})
	info, err := e.s.Stat(e.ctx, "v/k")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	page, err := e.s.List(e.ctx, objstore.ListOptions{Prefix: "v/"})
	if err != nil || len(page.Objects) != 1 {
		t.Fatalf("List: %v %v", page.Objects, err)
	}
	if got := page.Objects[0].Version; got != info.Version {
		t.Fatalf("listed Version %q, Stat Version %q", got, info.Version)
	}
	r, err := e.s.NewReader(e.ctx, "v/k", 0, -1, objstore.ReadOptions{IfVersion: page.Objects[0].Version})
	if err != nil {
		t.Fatalf("read with the listed version: %v", err)
	}
	if v := r.Info().Version; v != info.Version {
		t.Errorf("reader Version %q, Stat Version %q", v, info.Version)
	}
	r.Close()
}

// listTree is the key set the listing cases use, in lexical order ("-"
// sorts before "/", so "a-b" comes before the prefix "a/").
var listTree = []string{"a", "a-b", "a/b", "a/c/d", "b", "c/x", "c/y/z", "d"}

// drop removes the object "a" from want when the backend cannot hold it.
func (e *env) drop(want []string) []string {
	if !e.h.NoObjectPrefixCollision {
		return want
	}
	return slices.DeleteFunc(slices.Clone(want), func(k string) bool { return k == "a" })
}

func putTree(t *testing.T, e *env) map[string]int64 {
	t.Helper()
	sizes := make(map[string]int64)
	for i, k := range listTree {
		if k == "a" && e.h.NoObjectPrefixCollision {
			continue
		}
		sizes[k] = e.put(t, k, randBytes(uint64(i), int64(i+1)), objstore.PutOptions{}).Size
	}
	return sizes
}

func testListDelimiter(t *testing.T, e *env) {
	sizes := putTree(t, e)
	tests := []struct {
		prefix, delim string
		objects       []string
		prefixes      []string
	}{
		{prefix: "", delim: "/", objects: []string{"a", "a-b", "b", "d"}, prefixes: []string{"a/", "c/"}},
		{prefix: "a", delim: "/", objects: []string{"a", "a-b"}, prefixes: []string{"a/"}},
		{prefix: "a/", delim: "/", objects: []string{"a/b"}, prefixes: []string{"a/c/"}},
		{prefix: "a/c/", delim: "/", objects: []string{"a/c/d"}},
		{prefix: "c/", delim: "/", objects: []string{"c/x"}, prefixes: []string{"c/y/"}},
		{prefix: "", delim: "", objects: listTree},
		{prefix: "a/", delim: "", objects: []string{"a/b", "a/c/d"}},
		{prefix: "nothing/", delim: "/"},
		{prefix: "a/b", delim: "/", objects: []string{"a/b"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("prefix=%q,delim=%q", tt.prefix, tt.delim), func(t *testing.T) {
			page, err := e.s.List(e.ctx, objstore.ListOptions{Prefix: tt.prefix, Delimiter: tt.delim})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if page.NextToken != "" {
				t.Errorf("NextToken = %q on a small listing, want empty", page.NextToken)
			}
			var keys []string
			for _, o := range page.Objects {
				keys = append(keys, o.Key)
				if o.Size != sizes[o.Key] {
					t.Errorf("%s: Size = %d, want %d", o.Key, o.Size, sizes[o.Key])
				}
			}
			if !slices.Equal(keys, e.drop(tt.objects)) {
				t.Errorf("objects = %q, want %q", keys, tt.objects)
			}
			if !slices.Equal(page.Prefixes, tt.prefixes) {
				t.Errorf("prefixes = %q, want %q", page.Prefixes, tt.prefixes)
			}
		})
	}
}

func testListPagination(t *testing.T, e *env) {
	putTree(t, e)
	tests := []struct {
		delim    string
		maxKeys  int
		objects  []string
		prefixes []string
	}{
		{delim: "/", maxKeys: 1, objects: []string{"a", "a-b", "b", "d"}, prefixes: []string{"a/", "c/"}},
		{delim: "/", maxKeys: 2, objects: []string{"a", "a-b", "b", "d"}, prefixes: []string{"a/", "c/"}},
		{delim: "", maxKeys: 1, objects: listTree},
		{delim: "", maxKeys: 3, objects: listTree},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("delim=%q,max=%d", tt.delim, tt.maxKeys), func(t *testing.T) {
			seen := make(map[string]int)
			var objs, prefixes []string
			opts := objstore.ListOptions{Delimiter: tt.delim, MaxKeys: tt.maxKeys}
			for pages := 0; ; pages++ {
				if pages > 2*len(listTree)+2 {
					t.Fatal("pagination does not end")
				}
				page, err := e.s.List(e.ctx, opts)
				if err != nil {
					t.Fatalf("List page %d: %v", pages, err)
				}
				if n := len(page.Objects) + len(page.Prefixes); n > tt.maxKeys {
					t.Errorf("page %d has %d entries, above MaxKeys %d", pages, n, tt.maxKeys)
				}
				for _, o := range page.Objects {
					objs = append(objs, o.Key)
					seen[o.Key]++
				}
				for _, p := range page.Prefixes {
					prefixes = append(prefixes, p)
					seen[p]++
				}
				if page.NextToken == "" {
					break
				}
				opts.Token = page.NextToken
			}
			for k, n := range seen {
				if n != 1 {
					t.Errorf("%q listed %d times", k, n)
				}
			}
			if !slices.Equal(objs, e.drop(tt.objects)) {
				t.Errorf("objects = %q, want %q", objs, tt.objects)
			}
			if !slices.Equal(prefixes, tt.prefixes) {
				t.Errorf("prefixes = %q, want %q", prefixes, tt.prefixes)
			}
		})
	}
	t.Run("ListAll", func(t *testing.T) {
		objs, prefixes, err := objstore.ListAll(e.ctx, e.s, objstore.ListOptions{Delimiter: "/", MaxKeys: 1})
		if err != nil {
			t.Fatalf("ListAll: %v", err)
		}
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		if want := e.drop([]string{"a", "a-b", "b", "d"}); !slices.Equal(keys, want) {
			t.Errorf("ListAll objects = %q, want %q", keys, want)
		}
		if want := []string{"a/", "c/"}; !slices.Equal(prefixes, want) {
			t.Errorf("ListAll prefixes = %q, want %q", prefixes, want)
		}
	})
}

func testListEmpty(t *testing.T, e *env) {
	page, err := e.s.List(e.ctx, objstore.ListOptions{Delimiter: "/"})
	if err != nil {
		t.Fatalf("List of an empty store: %v", err)
	}
	if len(page.Objects)+len(page.Prefixes) != 0 || page.NextToken != "" {
		t.Errorf("List of an empty store = %+v, want nothing", page)
	}
}

// sortedKeys returns the keys of m in order, for messages.
func sortedKeys(m map[string]bool) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}
