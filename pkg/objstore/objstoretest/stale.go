package objstoretest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Call is one named call of a driver's test table.
type Call struct {
	Name string
	Call func(ctx context.Context) error
}

// CheckStaleVersion checks conditional operations against a real version
// that an overwrite replaced (a driver may treat it otherwise than the
// made-up versions of the conformance suite: an emulator that ignores a
// precondition, a version the driver parses). On s, which must implement
// objstore.Multipart, it writes "k" twice and stages one part of an upload
// of "k" conditional on the first version; then each of NewReader, a
// NewReader past the end, Copy to "dst", Delete, Delete of a missing key,
// Complete of that upload, and the calls that extra returns for the two
// versions and the upload, runs as a subtest and must fail with
// ErrPrecondition (and not ErrNotFound). Afterwards "k" must be unchanged,
// "dst" missing, and a Delete of "k" with the current version must succeed.
func CheckStaleVersion(t *testing.T, s objstore.Store, extra func(old, cur string, u objstore.Upload) []Call) {
	t.Helper()
	ctx := t.Context()
	put := func(data string) string {
		t.Helper()
		info, err := s.Put(ctx, "k", strings.NewReader(data), int64(len(data)), objstore.PutOptions{})
		if err != nil {
			t.Fatalf("Put(k): %v", err)
		}
		return info.Version
	}
	old := put("old")
	cur := put("new")
	if old == cur {
		t.Fatalf("overwrite kept version %s", old)
	}
	mp, ok := s.(objstore.Multipart)
	if !ok {
		t.Fatalf("%T does not implement objstore.Multipart", s)
	}
	u, err := mp.CreateUpload(ctx, "k", objstore.PutOptions{IfVersion: old})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort(context.WithoutCancel(ctx))
	if err := u.UploadPart(ctx, 1, strings.NewReader("part"), 4); err != nil {
		t.Fatal(err)
	}
	calls := []Call{
		{Name: "NewReader", Call: func(ctx context.Context) error {
			_, err := s.NewReader(ctx, "k", 0, -1, objstore.ReadOptions{IfVersion: old})
			return err
		}},
		{Name: "NewReaderPastEnd", Call: func(ctx context.Context) error {
			_, err := s.NewReader(ctx, "k", 10, 5, objstore.ReadOptions{IfVersion: old})
			return err
		}},
		{Name: "Copy", Call: func(ctx context.Context) error {
			_, err := s.Copy(ctx, "k", "dst", objstore.CopyOptions{IfVersion: old})
			return err
		}},
		{Name: "Delete", Call: func(ctx context.Context) error { return s.Delete(ctx, "k", objstore.DeleteOptions{IfVersion: old}) }},
		{Name: "DeleteMissing", Call: func(ctx context.Context) error {
			return s.Delete(ctx, "missing", objstore.DeleteOptions{IfVersion: cur})
		}},
		{Name: "Complete", Call: func(ctx context.Context) error { _, err := u.Complete(ctx); return err }},
	}
	if extra != nil {
		calls = append(calls, extra(old, cur, u)...)
	}
	for _, c := range calls {
		t.Run(c.Name, func(t *testing.T) {
			if err := c.Call(t.Context()); !errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("error = %v, want ErrPrecondition only", err)
			}
		})
	}
	if st, err := s.Stat(ctx, "k"); err != nil || st.Version != cur {
		t.Errorf("Stat after failed preconditions = %+v, %v; want version %s", st, err, cur)
	}
	if _, err := s.Stat(ctx, "dst"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(dst) = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "k", objstore.DeleteOptions{IfVersion: cur}); err != nil {
		t.Errorf("Delete(IfVersion current): %v", err)
	}
}
