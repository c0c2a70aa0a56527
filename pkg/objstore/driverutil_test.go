package objstore_test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

func TestRangeReader(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		size        int64
		off, length int64
		wantErr     bool
	}{
		{name: "whole object", body: "0123456789", size: 10, off: 0, length: -1},
		{name: "to the end", body: "56789", size: 10, off: 5, length: -1},
		{name: "range", body: "234", size: 10, off: 2, length: 3},
		{name: "range past the end", body: "89", size: 10, off: 8, length: 5},
		{name: "cut body", body: "01234", size: 10, off: 0, length: -1, wantErr: true},
		{name: "cut range", body: "23", size: 10, off: 2, length: 3, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := objstore.ObjectInfo{Key: "k", Size: tt.size, Version: "v"}
			wrapped := 0
			r := objstore.NewRangeReader(io.NopCloser(strings.NewReader(tt.body)), info, tt.off, tt.length, func(err error) error {
				wrapped++
				return &objstore.Error{Provider: "test", Op: "Read", Key: "k", Err: err}
			})
			got, err := io.ReadAll(r)
			if string(got) != tt.body {
				t.Errorf("read %q, want %q", got, tt.body)
			}
			if tt.wantErr != (err != nil) || (err != nil && (!errors.Is(err, io.ErrUnexpectedEOF) || wrapped != 1)) {
				t.Errorf("ReadAll error = %v (wrapped %d times), want io.ErrUnexpectedEOF: %v", err, wrapped, tt.wantErr)
			}
			if got := r.Info(); got.Key != "k" || got.Size != tt.size || got.Version != "v" {
				t.Errorf("Info() = %+v", got)
			}
			if err := r.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

func TestEmptyReader(t *testing.T) {
	r := objstore.EmptyReader(objstore.ObjectInfo{Key: "k", Size: 3})
	if n, err := r.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Errorf("Read = %d, %v; want 0, io.EOF", n, err)
	}
	if r.Info().Size != 3 || r.Close() != nil {
		t.Errorf("Info() = %+v", r.Info())
	}
}

func TestDeleteErr(t *testing.T) {
	notFound := &objstore.Error{Provider: "test", Op: "Delete", Status: 404, Code: "NoSuchKey", Kind: objstore.ErrNotFound}
	noBucket := &objstore.Error{Provider: "test", Op: "Delete", Status: 404, Kind: objstore.ErrNoBucket}
	denied := &objstore.Error{Provider: "test", Op: "Delete", Status: 403, Kind: objstore.ErrPermission}
	cause := errors.New("the object does not exist")
	tests := []struct {
		name      string
		err       error
		ifVersion string
		want      error // sentinel, or nil for success
		same      bool  // err is returned as is
	}{
		{name: "success", err: nil},
		{name: "missing", err: notFound},
		{name: "missing, conditional", err: notFound, ifVersion: "1", want: objstore.ErrPrecondition},
		{name: "no bucket", err: noBucket, want: objstore.ErrNoBucket, same: true},
		{name: "no bucket, conditional", err: noBucket, ifVersion: "1", want: objstore.ErrNoBucket, same: true},
		{name: "other", err: denied, ifVersion: "1", want: objstore.ErrPermission, same: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := objstore.DeleteErr(tt.err, tt.ifVersion, cause)
			switch {
			case tt.want == nil:
				if got != nil {
					t.Errorf("DeleteErr = %v, want nil", got)
				}
			case tt.same:
				if got != tt.err {
					t.Errorf("DeleteErr = %v, want %v as is", got, tt.err)
				}
			default:
				var oe *objstore.Error
				if !errors.Is(got, tt.want) || errors.Is(got, objstore.ErrNotFound) || !errors.Is(got, cause) ||
					!errors.As(got, &oe) || oe.Status != 404 || oe.Code != "NoSuchKey" {
					t.Errorf("DeleteErr = %v, want %v with the answer's status and code", got, tt.want)
				}
			}
		})
	}
}

func TestUploadID(t *testing.T) {
	a, err := objstore.NewUploadID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := objstore.NewUploadID()
	if a == b || !objstore.ValidUploadID(a) || !objstore.ValidUploadID(b) {
		t.Errorf("NewUploadID = %q, %q", a, b)
	}
	for _, id := range []string{"", "0123", "0123456789abcdeg", "0123456789abcdef0", "../../x/abcdefgh"} {
		if objstore.ValidUploadID(id) {
			t.Errorf("ValidUploadID(%q) = true", id)
		}
	}
}

func TestUploadParts(t *testing.T) {
	var u objstore.UploadParts[int64]
	if st, nums, _ := u.Parts(); st != objstore.UploadActive || len(nums) != 0 {
		t.Fatalf("zero value: %v %v", st, nums)
	}
	u.Set(3, 30)
	u.Set(1, 10)
	u.Set(3, 31) // replaces
	st, nums, vals := u.Parts()
	if st != objstore.UploadActive || !slices.Equal(nums, []int{1, 3}) || vals[1] != 10 || vals[3] != 31 {
		t.Errorf("Parts() = %v %v %v", st, nums, vals)
	}
	vals[1] = 99 // a copy
	if _, _, again := u.Parts(); again[1] != 10 {
		t.Errorf("Parts() shares its map")
	}
	if prev := u.Finish(objstore.UploadCompleted); prev != objstore.UploadActive {
		t.Errorf("Finish = %v, want active", prev)
	}
	if prev := u.Finish(objstore.UploadAborted); prev != objstore.UploadCompleted || u.State() != objstore.UploadCompleted {
		t.Errorf("Finish after completion = %v, state %v; want completed", prev, u.State())
	}
	if st, nums, _ := u.Parts(); st != objstore.UploadCompleted || nums != nil {
		t.Errorf("Parts() of a finished upload = %v %v", st, nums)
	}
	if s := objstore.UploadAborted.String(); s != "aborted" {
		t.Errorf("UploadAborted.String() = %q", s)
	}
}
