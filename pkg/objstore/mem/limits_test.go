package mem_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

func TestLimits(t *testing.T) {
	ctx := t.Context()
	put := func(s *mem.Store, key string, n int) error {
		_, err := s.Put(ctx, key, bytes.NewReader(make([]byte, n)), int64(n), objstore.PutOptions{})
		return err
	}
	tests := []struct {
		name      string
		run       func(s *mem.Store) error
		wantFinal bool // a non-retryable error
	}{
		{name: "put at MaxSinglePut", run: func(s *mem.Store) error { return put(s, "k", 100) }},
		{name: "put above MaxSinglePut", run: func(s *mem.Store) error { return put(s, "k", 101) }, wantFinal: true},
		{name: "empty key", run: func(s *mem.Store) error { return put(s, "", 1) }, wantFinal: true},
		{name: "short source", run: func(s *mem.Store) error {
			_, err := s.Put(ctx, "k", bytes.NewReader(make([]byte, 5)), 10, objstore.PutOptions{})
			return err
		}, wantFinal: true},
		{name: "small non-final part", run: func(s *mem.Store) error {
			u, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
			if err != nil {
				return err
			}
			for n, size := range []int{15, 16} {
				if err := u.UploadPart(ctx, n+1, bytes.NewReader(make([]byte, size)), int64(size)); err != nil {
					return err
				}
			}
			_, err = u.Complete(ctx)
			return err
		}, wantFinal: true},
		{name: "no parts", run: func(s *mem.Store) error {
			u, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
			if err != nil {
				return err
			}
			_, err = u.Complete(ctx)
			return err
		}, wantFinal: true},
		{name: "part number zero", run: func(s *mem.Store) error {
			u, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
			if err != nil {
				return err
			}
			return u.UploadPart(ctx, 0, bytes.NewReader(nil), 0)
		}, wantFinal: true},
		{name: "copy part beyond source", run: func(s *mem.Store) error {
			if err := put(s, "src", 10); err != nil {
				return err
			}
			u, err := s.CreateUpload(ctx, "k", objstore.PutOptions{})
			if err != nil {
				return err
			}
			return u.CopyPart(ctx, 1, "src", 5, 10)
		}, wantFinal: true},
		{name: "after close", run: func(s *mem.Store) error {
			s.Close()
			_, err := s.Stat(ctx, "k")
			return err
		}, wantFinal: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mem.New(mem.Options{MinPartSize: 16, MaxSinglePut: 100})
			err := tt.run(s)
			switch {
			case tt.name == "after close":
				if err == nil {
					t.Error("Stat after Close succeeded")
				}
			case !tt.wantFinal && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.wantFinal && (err == nil || objstore.Retryable(err)):
				t.Errorf("error = %v, want a final one", err)
			}
		})
	}
}

func TestClockAndTags(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := mem.New(mem.Options{Now: func() time.Time { return now }})
	ctx := t.Context()
	tags := map[string]string{"Project": "ferry"}
	if _, err := s.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{Tags: tags, Metadata: map[string]string{"Mixed-Case": "v"}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime.Equal(now) {
		t.Errorf("ModTime = %v, want %v", st.ModTime, now)
	}
	if st.Metadata["mixed-case"] != "v" {
		t.Errorf("Metadata = %v, want lower-case keys", st.Metadata)
	}
	got, err := s.Tags("k")
	if err != nil || got["Project"] != "ferry" {
		t.Errorf("Tags = %v, %v", got, err)
	}
	if _, err := s.Tags("missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Tags(missing) = %v, want ErrNotFound", err)
	}
	// Callers cannot mutate stored metadata through returned maps.
	st.Metadata["mixed-case"] = "changed"
	if st2, _ := s.Stat(ctx, "k"); st2.Metadata["mixed-case"] != "v" {
		t.Error("stored metadata aliased by Stat's result")
	}
}
