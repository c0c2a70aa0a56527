package objstoretest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func preconditionCases() []testCase {
	return []testCase{
		{name: "Preconditions", run: testPreconditions},
		{name: "DeleteIfVersion", run: testDeleteIfVersion},
	}
}

func testPreconditions(t *testing.T, e *env) {
	old := e.put(t, "k", []byte("old"), objstore.PutOptions{}).Version
	const stale = "stale-version-0"
	put := func(data string, opts objstore.PutOptions) error {
		_, err := e.s.Put(e.ctx, "k", bytes.NewReader([]byte(data)), int64(len(data)), opts)
		return err
	}
	read := func(opts objstore.ReadOptions) error {
		r, err := e.s.NewReader(e.ctx, "k", 0, -1, opts)
		if err == nil {
			r.Close()
		}
		return err
	}
	cp := func(opts objstore.CopyOptions) error {
		_, err := e.s.Copy(e.ctx, "k", "dst", opts)
		return err
	}
	failing := []struct {
		name string
		call func() error
	}{
		{name: "PutIfAbsentExisting", call: func() error { return put("new", objstore.PutOptions{IfAbsent: true}) }},
		{name: "PutIfVersionMismatch", call: func() error { return put("new", objstore.PutOptions{IfVersion: stale}) }},
		{name: "NewReaderIfVersionMismatch", call: func() error { return read(objstore.ReadOptions{IfVersion: stale}) }},
		{name: "CopyIfVersionMismatch", call: func() error { return cp(objstore.CopyOptions{IfVersion: stale}) }},
		{name: "PutIfVersionMissingKey", call: func() error {
			_, err := e.s.Put(e.ctx, "missing", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{IfVersion: old})
			return err
		}},
	}
	for _, tc := range failing {
		t.Run(tc.name, func(t *testing.T) {
			wantErrIs(t, tc.name, tc.call(), objstore.ErrPrecondition)
		})
	}
	if got, _ := e.read(t, "k", 0, -1, objstore.ReadOptions{}); string(got) != "old" {
		t.Fatalf("failed preconditions changed the object: %q", got)
	}
	e.wantMissing(t, "dst")
	e.wantMissing(t, "missing")

	t.Run("Matching", func(t *testing.T) {
		if got, info := e.read(t, "k", 0, -1, objstore.ReadOptions{IfVersion: old}); string(got) != "old" || info.Version != old {
			t.Errorf("NewReader(IfVersion) = %q version %q", got, info.Version)
		}
		if err := cp(objstore.CopyOptions{IfVersion: old}); err != nil {
			t.Errorf("Copy(IfVersion matching): %v", err)
		}
		info, err := e.s.Put(e.ctx, "k", bytes.NewReader([]byte("new")), 3, objstore.PutOptions{IfVersion: old})
		if err != nil {
			t.Fatalf("Put(IfVersion matching): %v", err)
		}
		if info.Version == old {
			t.Error("Put(IfVersion) kept the old version")
		}
		// The old version is now stale.
		wantErrIs(t, "Put with the replaced version", put("newer", objstore.PutOptions{IfVersion: old}), objstore.ErrPrecondition)
		wantErrIs(t, "NewReader with the replaced version", read(objstore.ReadOptions{IfVersion: old}), objstore.ErrPrecondition)
		if _, err := e.s.Put(e.ctx, "fresh", bytes.NewReader([]byte("f")), 1, objstore.PutOptions{IfAbsent: true}); err != nil {
			t.Errorf("Put(IfAbsent) of a new key: %v", err)
		}
	})
}

// testDeleteIfVersion checks that a mismatched IfVersion never deletes.
// Backends without conditional delete return ErrUnsupported.
func testDeleteIfVersion(t *testing.T, e *env) {
	v := e.put(t, "k", []byte("x"), objstore.PutOptions{}).Version
	err := e.s.Delete(e.ctx, "k", objstore.DeleteOptions{IfVersion: "stale-version-0"})
	if errors.Is(err, objstore.ErrUnsupported) {
		t.Log("conditional delete unsupported")
		e.stat(t, "k")
		return
	}
	wantErrIs(t, "Delete(IfVersion mismatch)", err, objstore.ErrPrecondition)
	e.stat(t, "k")
	if err := e.s.Delete(e.ctx, "k", objstore.DeleteOptions{IfVersion: v}); err != nil {
		t.Fatalf("Delete(IfVersion matching): %v", err)
	}
	e.wantMissing(t, "k")
}
