package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func basicCases() []testCase {
	return []testCase{
		{name: "NotFound", run: testNotFound},
		{name: "DeleteMissing", run: testDeleteMissing},
		{name: "PutStatReadDelete", run: testPutStatReadDelete},
		{name: "OverwriteChangesVersion", run: testOverwriteChangesVersion},
		{name: "KeyNames", run: testKeyNames},
		{name: "Metadata", run: testMetadata},
		{name: "Copy", run: testCopy},
		{name: "CopyOntoItself", run: testCopyOntoItself},
		{name: "ConcurrentPuts", run: testConcurrentPuts},
		{name: "CanceledContext", run: testCanceledContext},
	}
}

func testNotFound(t *testing.T, e *env) {
	ops := []struct {
		name string
		call func() error
	}{
		{name: "Stat", call: func() error {
			_, err := e.s.Stat(e.ctx, "missing")
			return err
		}},
		{name: "NewReader", call: func() error {
			r, err := e.s.NewReader(e.ctx, "missing", 0, -1, objstore.ReadOptions{})
			if err == nil {
				r.Close()
			}
			return err
		}},
		{name: "NewReaderRange", call: func() error {
			r, err := e.s.NewReader(e.ctx, "missing/deeper", 10, 5, objstore.ReadOptions{})
			if err == nil {
				r.Close()
			}
			return err
		}},
		{name: "Copy", call: func() error {
			_, err := e.s.Copy(e.ctx, "missing", "dst", objstore.CopyOptions{})
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			wantErrIs(t, op.name, op.call(), objstore.ErrNotFound)
		})
	}
	e.wantMissing(t, "dst")
}

func testDeleteMissing(t *testing.T, e *env) {
	if err := e.s.Delete(e.ctx, "missing", objstore.DeleteOptions{}); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
}

func testPutStatReadDelete(t *testing.T, e *env) {
	data := []byte("hello, ferry")
	put := e.put(t, "dir/file.txt", data, objstore.PutOptions{ContentType: "text/plain"})
	st := e.stat(t, "dir/file.txt")
	if st.Key != "dir/file.txt" || st.Size != int64(len(data)) || st.Version != put.Version {
		t.Errorf("Stat = {Key %q Size %d Version %q}, want {dir/file.txt %d %q}", st.Key, st.Size, st.Version, len(data), put.Version)
	}
	if st.ModTime.IsZero() {
		t.Error("Stat.ModTime is zero")
	}
	got, info := e.read(t, "dir/file.txt", 0, -1, objstore.ReadOptions{})
	if !bytes.Equal(got, data) {
		t.Errorf("read %q, want %q", got, data)
	}
	if info.Size != int64(len(data)) || info.Version != put.Version {
		t.Errorf("Reader.Info = {Size %d Version %q}, want {%d %q}", info.Size, info.Version, len(data), put.Version)
	}
	// The media type comes back where the contract says it does (a zero-
	// byte application/x-directory object is a directory to the vfs).
	if st.ContentType != "text/plain" || info.ContentType != "text/plain" {
		t.Errorf("ContentType: Stat %q, Reader.Info %q, want text/plain", st.ContentType, info.ContentType)
	}
	if e.s.Caps().ListMetadata {
		page, err := e.s.List(e.ctx, objstore.ListOptions{Prefix: "dir/"})
		if err != nil || len(page.Objects) != 1 || page.Objects[0].ContentType != "text/plain" {
			t.Errorf("List (with metadata) = %+v, %v; want dir/file.txt of text/plain", page.Objects, err)
		}
	}
	if err := e.s.Delete(e.ctx, "dir/file.txt", objstore.DeleteOptions{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.wantMissing(t, "dir/file.txt")
}

func testOverwriteChangesVersion(t *testing.T, e *env) {
	v1 := e.put(t, "k", []byte("first"), objstore.PutOptions{}).Version
	v2 := e.put(t, "k", []byte("second, longer"), objstore.PutOptions{}).Version
	if v1 == v2 {
		t.Errorf("overwrite kept version %q", v1)
	}
	if st := e.stat(t, "k"); st.Version != v2 || st.Size != int64(len("second, longer")) {
		t.Errorf("Stat after overwrite = {Version %q Size %d}, want {%q %d}", st.Version, st.Size, v2, len("second, longer"))
	}
	if got, _ := e.read(t, "k", 0, -1, objstore.ReadOptions{}); string(got) != "second, longer" {
		t.Errorf("read after overwrite = %q", got)
	}
}

func testKeyNames(t *testing.T, e *env) {
	keys := []string{
		"with space",
		"dir with space/file name.txt",
		"unicode/ünïcødé-文件-😀",
		"plus+sign",
		"percent%20sign%",
		"hash#tag",
		"question?mark=1&x=y",
		"tilde~ and (parens) [brackets] 'quote' $dollar @at ;semi :colon ,comma",
	}
	want := make(map[string]bool)
	for i, k := range keys {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			data := []byte("key " + k)
			e.put(t, k, data, objstore.PutOptions{})
			if st := e.stat(t, k); st.Key != k || st.Size != int64(len(data)) {
				t.Errorf("Stat(%q) = {Key %q Size %d}", k, st.Key, st.Size)
			}
			if got, _ := e.read(t, k, 0, -1, objstore.ReadOptions{}); !bytes.Equal(got, data) {
				t.Errorf("read(%q) = %q, want %q", k, got, data)
			}
			if _, err := e.s.Copy(e.ctx, k, k+".copy", objstore.CopyOptions{}); err != nil {
				t.Errorf("Copy(%q): %v", k, err)
			}
			want[k], want[k+".copy"] = true, true
		})
	}
	objs, _, err := objstore.ListAll(e.ctx, e.s, objstore.ListOptions{})
	if err != nil {
		t.Fatalf("ListAll: %v", err)
	}
	got := make(map[string]bool)
	for _, o := range objs {
		got[o.Key] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("ListAll keys = %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	for _, k := range keys {
		if err := e.s.Delete(e.ctx, k, objstore.DeleteOptions{}); err != nil {
			t.Errorf("Delete(%q): %v", k, err)
		}
		e.wantMissing(t, k)
	}
}

func testMetadata(t *testing.T, e *env) {
	if !e.s.Caps().Metadata {
		t.Log("Caps().Metadata is false: metadata not checked")
		return
	}
	meta := map[string]string{"color": "blue", "mode": "0644", "owner": "1000:1000"}
	e.put(t, "m", []byte("x"), objstore.PutOptions{Metadata: meta})
	if got := e.stat(t, "m").Metadata; !maps.Equal(got, meta) {
		t.Errorf("Stat.Metadata = %v, want %v", got, meta)
	}
	e.put(t, "m", []byte("y"), objstore.PutOptions{})
	if got := e.stat(t, "m").Metadata; len(got) != 0 {
		t.Errorf("Stat.Metadata after overwrite without metadata = %v, want none", got)
	}
}

func testCopy(t *testing.T, e *env) {
	meta := map[string]string{"color": "blue"}
	data := randBytes(1, 4096)
	src := e.put(t, "src", data, objstore.PutOptions{Metadata: meta})

	info, err := e.s.Copy(e.ctx, "src", "dir/dst", objstore.CopyOptions{})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if info.Size != src.Size || info.Version == "" {
		t.Errorf("Copy = {Size %d Version %q}, want {%d non-empty}", info.Size, info.Version, src.Size)
	}
	if got, _ := e.read(t, "dir/dst", 0, -1, objstore.ReadOptions{}); !bytes.Equal(got, data) {
		t.Error("copied content differs from source")
	}
	if e.s.Caps().Metadata {
		if got := e.stat(t, "dir/dst").Metadata; !maps.Equal(got, meta) {
			t.Errorf("copy kept metadata %v, want %v", got, meta)
		}
		repl := map[string]string{"shape": "round"}
		if _, err := e.s.Copy(e.ctx, "src", "dir/dst2", objstore.CopyOptions{Metadata: repl}); err != nil {
			t.Fatalf("Copy with metadata: %v", err)
		}
		if got := e.stat(t, "dir/dst2").Metadata; !maps.Equal(got, repl) {
			t.Errorf("copy with Metadata has %v, want %v", got, repl)
		}
	}
	// Source untouched; overwriting the copy leaves the source alone.
	e.put(t, "dir/dst", []byte("new"), objstore.PutOptions{})
	if got, _ := e.read(t, "src", 0, -1, objstore.ReadOptions{}); !bytes.Equal(got, data) {
		t.Error("source changed after overwriting its copy")
	}
}

// testCopyOntoItself checks the metadata update that chmod and utimens use:
// a copy of an object onto itself with new metadata keeps its content.
func testCopyOntoItself(t *testing.T, e *env) {
	if !e.s.Caps().Metadata {
		t.Log("Caps().Metadata is false: self-copy not checked")
		return
	}
	data := randBytes(2, 1000)
	v1 := e.put(t, "src", data, objstore.PutOptions{Metadata: map[string]string{"color": "blue"}}).Version
	if _, err := e.s.Copy(e.ctx, "src", "src", objstore.CopyOptions{Metadata: map[string]string{"color": "red"}}); err != nil {
		t.Fatalf("Copy onto itself: %v", err)
	}
	st := e.stat(t, "src")
	if st.Metadata["color"] != "red" {
		t.Errorf("self-copy metadata = %v, want color=red", st.Metadata)
	}
	if st.Version == v1 {
		t.Log("note: self-copy kept the version (allowed: content is unchanged)")
	}
	if got, _ := e.read(t, "src", 0, -1, objstore.ReadOptions{}); !bytes.Equal(got, data) {
		t.Error("self-copy changed content")
	}
}

func testConcurrentPuts(t *testing.T, e *env) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := randBytes(uint64(i), int64(1000+i))
			_, errs[i] = e.s.Put(e.ctx, fmt.Sprintf("c/%02d", i), bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Put: %v", err)
	}
	for i := range n {
		key := fmt.Sprintf("c/%02d", i)
		if got, _ := e.read(t, key, 0, -1, objstore.ReadOptions{}); !bytes.Equal(got, randBytes(uint64(i), int64(1000+i))) {
			t.Errorf("%s: content differs", key)
		}
	}
	objs, _, err := objstore.ListAll(e.ctx, e.s, objstore.ListOptions{Prefix: "c/"})
	if err != nil || len(objs) != n {
		t.Errorf("ListAll(c/) = %d objects, %v; want %d", len(objs), err, n)
	}
}

func testCanceledContext(t *testing.T, e *env) {
	e.put(t, "k", []byte("x"), objstore.PutOptions{})
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.s.Stat(ctx, "k"); err == nil {
		t.Error("Stat with a canceled context succeeded")
	}
	if _, err := e.s.Put(ctx, "k2", bytes.NewReader([]byte("y")), 1, objstore.PutOptions{}); err == nil {
		t.Error("Put with a canceled context succeeded")
	}
}
