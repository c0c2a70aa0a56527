package nextflow

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// statHook wraps a store and runs a function before each Stat.
type statHook struct {
	objstore.Store
	calls  atomic.Int32
	before func(n int32) error
}

func (s *statHook) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	n := s.calls.Add(1)
	if s.before != nil {
		if err := s.before(n); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	return s.Store.Stat(ctx, key)
}

func TestWaitCommand(t *testing.T) {
	const key = "work/ab/.command.sh"
	fast := WaitOptions{Attempts: 4, Initial: time.Millisecond, Max: 2 * time.Millisecond}
	tests := []struct {
		name      string
		appearAt  int32 // Stat call that first sees the object; 0 = never
		failWith  error
		opts      WaitOptions
		wantErr   error
		wantCalls int32
	}{
		{name: "present", appearAt: 1, opts: fast, wantCalls: 1},
		{name: "appears on the third look", appearAt: 3, opts: fast, wantCalls: 3},
		{name: "never appears", opts: fast, wantErr: ErrCommandMissing, wantCalls: 4},
		{name: "attempts below one mean one", opts: WaitOptions{Initial: time.Millisecond}, wantErr: ErrCommandMissing, wantCalls: 1},
		{name: "permission error is final", failWith: objstore.ErrPermission, opts: fast, wantErr: objstore.ErrPermission, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := &statHook{Store: mem.New(mem.Options{})}
			st.before = func(n int32) error {
				if tc.failWith != nil {
					return tc.failWith
				}
				if tc.appearAt != 0 && n == tc.appearAt {
					_, err := st.Store.Put(ctx, key, bytes.NewReader([]byte("echo")), 4, objstore.PutOptions{})
					return err
				}
				return nil
			}
			err := WaitCommand(ctx, st, key, tc.opts)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == ErrCommandMissing && !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("ErrCommandMissing must wrap ErrNotFound")
			}
			if got := st.calls.Load(); got != tc.wantCalls {
				t.Fatalf("Stat calls = %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestWaitCommandContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := &statHook{Store: mem.New(mem.Options{}), before: func(int32) error { cancel(); return nil }}
	err := WaitCommand(ctx, st, "k", WaitOptions{Attempts: 100, Initial: time.Hour})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestUploadFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	big := filepath.Join(dir, "big")
	bigData := bytes.Repeat([]byte("0123456789"), 300)
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, bigData, 0o600); err != nil {
		t.Fatal(err)
	}
	tags := objstore.PutOptions{Tags: map[string]string{"nextflow.io/metadata": "true"}}
	tests := []struct {
		name, path, key string
		want            []byte
	}{
		{name: "single put", path: small, key: "w/.command.log", want: []byte("hello")},
		{name: "multipart past the single-put limit", path: big, key: "w/.fusion.log", want: bigData},
	}
	st := mem.New(mem.Options{MaxSinglePut: 1000, MinPartSize: 100})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := UploadFile(ctx, st, tc.key, tc.path, tags)
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != int64(len(tc.want)) {
				t.Fatalf("size = %d", info.Size)
			}
			if got := readObject(t, st, tc.key); !bytes.Equal(got, tc.want) {
				t.Fatalf("content differs (%d bytes)", len(got))
			}
			if got, _ := st.Tags(tc.key); got["nextflow.io/metadata"] != "true" {
				t.Fatalf("tags = %v", got)
			}
		})
	}
	if _, err := UploadFile(ctx, st, "x", filepath.Join(dir, "missing"), objstore.PutOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestUploadParts(t *testing.T) {
	ctx := context.Background()
	st := mem.New(mem.Options{MinPartSize: 10})
	data := []byte("abcdefghijklmnopqrstuvwxyz")
	if _, err := uploadParts(ctx, st, "k", bytes.NewReader(data), int64(len(data)), 10, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, st, "k"); !bytes.Equal(got, data) {
		t.Fatalf("got %q", got)
	}
	// A failing part aborts the upload.
	_, err := uploadParts(ctx, st, "k2", failingReaderAt{}, 30, 10, objstore.PutOptions{})
	if err == nil || st.PendingUploads() != 0 {
		t.Fatalf("err = %v, pending uploads = %d", err, st.PendingUploads())
	}
}

type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk gone") }

func readObject(t *testing.T, st objstore.Store, key string) []byte {
	t.Helper()
	rd, err := st.NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
