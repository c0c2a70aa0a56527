package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func multipartCases() []testCase {
	return []testCase{
		{name: "MultipartOutOfOrder", run: testMultipartOutOfOrder},
		{name: "MultipartCopyPart", run: testMultipartCopyPart},
		{name: "MultipartCopyPartNotFound", run: testMultipartCopyPartNotFound},
		{name: "MultipartAbort", run: testMultipartAbort},
		{name: "MultipartAbortUploadByID", run: testMultipartAbortUploadByID},
		{name: "MultipartIfAbsent", run: testMultipartIfAbsent},
	}
}

// multipart returns the store as Multipart, or nil (after logging) when it
// is not one.
func (e *env) multipart(t *testing.T) objstore.Multipart {
	t.Helper()
	mp, ok := e.s.(objstore.Multipart)
	if !ok {
		t.Log("store does not implement objstore.Multipart: case not applicable")
	}
	return mp
}

// partSize is the part size the multipart cases use: the backend minimum.
func (e *env) partSize() int64 {
	if ps := e.s.Caps().MinPartSize; ps > 0 {
		return ps
	}
	return 64 << 10
}

// create starts an upload and registers an abort for cleanup.
func (e *env) create(t *testing.T, mp objstore.Multipart, key string, opts objstore.PutOptions) objstore.Upload {
	t.Helper()
	u, err := mp.CreateUpload(e.ctx, key, opts)
	if err != nil {
		t.Fatalf("CreateUpload(%q): %v", key, err)
	}
	if u.ID() == "" {
		t.Error("Upload.ID() is empty")
	}
	t.Cleanup(func() { _ = u.Abort(context.WithoutCancel(e.ctx)) })
	return u
}

func uploadPart(t *testing.T, e *env, u objstore.Upload, n int, data []byte) {
	t.Helper()
	if err := u.UploadPart(e.ctx, n, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("UploadPart(%d, %d bytes): %v", n, len(data), err)
	}
}

// wantPending checks the harness's pending-upload count, when it has one.
func (e *env) wantPending(t *testing.T, want int) {
	t.Helper()
	if got := e.pending(t); got >= 0 && got != want {
		t.Errorf("pending uploads = %d, want %d", got, want)
	}
}

func testMultipartOutOfOrder(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	ps := e.partSize()
	data := randBytes(10, 2*ps+1234)
	parts := [][]byte{data[:ps], data[ps : 2*ps], data[2*ps:]}
	meta := map[string]string{"color": "green"}
	u := e.create(t, mp, "big", objstore.PutOptions{Metadata: meta})
	e.wantPending(t, 1)
	// Last part first, then a wrong part 1 that is replaced.
	uploadPart(t, e, u, 3, parts[2])
	uploadPart(t, e, u, 1, randBytes(11, ps))
	uploadPart(t, e, u, 2, parts[1])
	uploadPart(t, e, u, 1, parts[0])
	info, err := u.Complete(e.ctx)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if info.Size != int64(len(data)) || info.Version == "" {
		t.Errorf("Complete = {Size %d Version %q}, want {%d non-empty}", info.Size, info.Version, len(data))
	}
	st := e.stat(t, "big")
	if st.Size != int64(len(data)) || st.Version != info.Version {
		t.Errorf("Stat = {Size %d Version %q}, want {%d %q}", st.Size, st.Version, len(data), info.Version)
	}
	if e.s.Caps().Metadata && !maps.Equal(st.Metadata, meta) {
		t.Errorf("Stat.Metadata = %v, want %v", st.Metadata, meta)
	}
	got, _ := e.read(t, "big", 0, -1, objstore.ReadOptions{})
	if !bytes.Equal(got, data) {
		t.Errorf("assembled object differs (%d bytes, want %d)", len(got), len(data))
	}
	// A range across the part boundary.
	got, _ = e.read(t, "big", ps-10, 20, objstore.ReadOptions{})
	if !bytes.Equal(got, data[ps-10:ps+10]) {
		t.Error("range across a part boundary differs")
	}
	e.wantPending(t, 0)
}

func testMultipartCopyPart(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	if !e.s.Caps().CopyPart {
		t.Log("Caps().CopyPart is false: case not applicable")
		return
	}
	ps := e.partSize()
	src := randBytes(20, ps+300)
	e.put(t, "src", src, objstore.PutOptions{})
	middle := randBytes(21, ps)
	u := e.create(t, mp, "dst", objstore.PutOptions{CopyParts: true})
	if err := u.CopyPart(e.ctx, 3, "src", 50, 100); err != nil {
		t.Fatalf("CopyPart(3, src[50:150]): %v", err)
	}
	uploadPart(t, e, u, 2, middle)
	if err := u.CopyPart(e.ctx, 1, "src", 0, ps); err != nil {
		t.Fatalf("CopyPart(1, src[0:%d]): %v", ps, err)
	}
	if _, err := u.Complete(e.ctx); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := append(append(append([]byte{}, src[:ps]...), middle...), src[50:150]...)
	got, _ := e.read(t, "dst", 0, -1, objstore.ReadOptions{})
	if !bytes.Equal(got, want) {
		t.Errorf("assembled object differs (%d bytes, want %d)", len(got), len(want))
	}
}

func testMultipartCopyPartNotFound(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	if !e.s.Caps().CopyPart {
		t.Log("Caps().CopyPart is false: case not applicable")
		return
	}
	u := e.create(t, mp, "dst", objstore.PutOptions{CopyParts: true})
	wantErrIs(t, "CopyPart(missing source)", u.CopyPart(e.ctx, 1, "missing", 0, 10), objstore.ErrNotFound)
	if err := u.Abort(e.ctx); err != nil {
		t.Errorf("Abort: %v", err)
	}
}

func testMultipartAbort(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	base := e.pending(t)
	u := e.create(t, mp, "aborted", objstore.PutOptions{})
	uploadPart(t, e, u, 1, randBytes(30, 1000))
	if base >= 0 {
		e.wantPending(t, base+1)
	}
	if err := u.Abort(e.ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	e.wantMissing(t, "aborted")
	if base >= 0 {
		e.wantPending(t, base)
	}
	if _, err := u.Complete(e.ctx); err == nil {
		t.Error("Complete after Abort succeeded")
	}
	e.wantMissing(t, "aborted")
}

func testMultipartAbortUploadByID(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	base := e.pending(t)
	u := e.create(t, mp, "orphan", objstore.PutOptions{})
	uploadPart(t, e, u, 1, randBytes(31, 1000))
	id := u.ID()
	// As a restarted process would: only the key and the ID are known.
	if err := mp.AbortUpload(e.ctx, "orphan", id); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	if base >= 0 {
		e.wantPending(t, base)
	}
	e.wantMissing(t, "orphan")
	if _, err := u.Complete(e.ctx); err == nil {
		t.Error("Complete after AbortUpload succeeded")
	}
	if err := mp.AbortUpload(e.ctx, "orphan", id); err != nil {
		t.Errorf("AbortUpload of an aborted upload = %v, want nil", err)
	}
}

func testMultipartIfAbsent(t *testing.T, e *env) {
	mp := e.multipart(t)
	if mp == nil {
		return
	}
	e.put(t, "exists", []byte("old"), objstore.PutOptions{})
	u := e.create(t, mp, "exists", objstore.PutOptions{IfAbsent: true})
	uploadPart(t, e, u, 1, []byte("new"))
	_, err := u.Complete(e.ctx)
	if errors.Is(err, objstore.ErrUnsupported) {
		t.Log("conditional multipart upload unsupported")
		return
	}
	wantErrIs(t, "Complete(IfAbsent) over an existing key", err, objstore.ErrPrecondition)
	if got, _ := e.read(t, "exists", 0, -1, objstore.ReadOptions{}); string(got) != "old" {
		t.Errorf("object after failed conditional Complete = %q, want old", got)
	}
	if err := u.Abort(e.ctx); err != nil {
		t.Errorf("Abort after failed Complete: %v", err)
	}
}
