package gcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// testPartSize keeps multipart cases small; GCS has no minimum part size.
const testPartSize = 256 << 10

// newTestStore returns a Store on a fresh bucket of the test binary's
// fake-gcs-server, with its Config changed by opts.
func newTestStore(t *testing.T, opts ...func(*Config)) *Store {
	t.Helper()
	srv := testenv.FakeGCS(t)
	cfg := Config{Bucket: srv.NewBucket(t), Endpoint: srv.Host, Emulator: true, MinPartSize: testPartSize}
	for _, o := range opts {
		o(&cfg)
	}
	return objstoretest.Open(t, func() (*Store, error) { return New(t.Context(), cfg) })
}

// pendingUploads counts the upload IDs that still have temporaries.
func pendingUploads(t *testing.T, s *Store) int {
	t.Helper()
	ids := make(map[string]bool)
	it := s.bkt.Objects(t.Context(), &storage.Query{})
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return len(ids)
		}
		if err != nil {
			t.Fatalf("listing temporaries: %v", err)
		}
		if _, rest, ok := strings.Cut(a.Name, PartInfix); ok {
			id, _, _ := strings.Cut(rest, "/")
			ids[id] = true
		}
	}
}

func TestConformance(t *testing.T) {
	newStore := func(t *testing.T) *Store { return newTestStore(t) }
	objstoretest.Run(t, objstoretest.HarnessFor(newStore, pendingUploads))
}

// TestEmulatorPreconditions checks, with real (numeric) generations, the
// preconditions fake-gcs-server ignores and the driver checks itself.
func TestEmulatorPreconditions(t *testing.T) {
	s := newTestStore(t)
	objstoretest.CheckStaleVersion(t, s, func(old, _ string, _ objstore.Upload) []objstoretest.Call {
		return []objstoretest.Call{
			{Name: "NewReaderEmptyRange", Call: func(ctx context.Context) error {
				_, err := s.NewReader(ctx, "k", 0, 0, objstore.ReadOptions{IfVersion: old})
				return err
			}},
			{Name: "CopyWithMetadata", Call: func(ctx context.Context) error {
				_, err := s.Copy(ctx, "k", "dst", objstore.CopyOptions{IfVersion: old, Metadata: map[string]string{"a": "b"}})
				return err
			}},
		}
	})
}

// TestComposeTree completes an upload of more parts than one compose
// takes, and checks that no temporary is left.
func TestComposeTree(t *testing.T) {
	s := newTestStore(t)
	ctx := t.Context()
	const parts = 2*maxComposeSources + 7 // 71: three composes, then the final one
	u, err := s.CreateUpload(ctx, "tree", objstore.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for n := 1; n <= parts; n++ {
		want.WriteString(fmt.Sprintf("part %03d;", n))
	}
	// Upload in reverse, concurrently.
	err = parallel(ctx, parts, 8, func(ctx context.Context, i int) error {
		n := parts - i
		data := fmt.Sprintf("part %03d;", n)
		return u.UploadPart(ctx, n, strings.NewReader(data), int64(len(data)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := pendingUploads(t, s); got != 1 {
		t.Errorf("pending uploads = %d, want 1", got)
	}
	info, err := u.Complete(ctx)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if info.Size != int64(want.Len()) || info.Metadata["k"] != "v" {
		t.Errorf("Complete = %+v", info)
	}
	r, err := s.NewReader(ctx, "tree", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("composed object = %q, %v; want %q", got, err, want.Bytes())
	}
	if n := pendingUploads(t, s); n != 0 {
		t.Errorf("pending uploads after Complete = %d, want 0", n)
	}
	if err := u.UploadPart(ctx, 1, strings.NewReader("x"), 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("UploadPart after Complete = %v, want ErrNotFound", err)
	}
	if err := u.Abort(ctx); err != nil {
		t.Errorf("Abort after Complete = %v", err)
	}
	if _, err := s.Stat(ctx, "tree"); err != nil {
		t.Errorf("Abort after Complete removed the object: %v", err)
	}
}

// TestListHidesParts: an upload in progress is invisible to List.
func TestListHidesParts(t *testing.T) {
	s := newTestStore(t)
	ctx := t.Context()
	u, err := s.CreateUpload(ctx, "dir/file", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort(context.WithoutCancel(ctx))
	if err := u.UploadPart(ctx, 1, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []objstore.ListOptions{{}, {Delimiter: "/"}, {Prefix: "dir/", Delimiter: "/"}, {Prefix: "dir/"}} {
		objs, prefixes, err := objstore.ListAll(ctx, s, opts)
		if err != nil || len(objs)+len(prefixes) != 0 {
			t.Errorf("ListAll(%+v) = %v %v %v, want nothing", opts, objs, prefixes, err)
		}
	}
}

// TestPutShortSource: a source shorter than size fails and stores nothing.
func TestPutShortSource(t *testing.T) {
	s := newTestStore(t)
	_, err := s.Put(t.Context(), "k", strings.NewReader("abc"), 10, objstore.PutOptions{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Put = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := s.Stat(t.Context(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat after failed Put = %v, want ErrNotFound", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")
	if c := ConfigFromEnv(); c.Endpoint != "127.0.0.1:4443" || !c.Emulator {
		t.Errorf("ConfigFromEnv with STORAGE_EMULATOR_HOST = %+v", c)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	if c := ConfigFromEnv(); c.Endpoint != "" || c.Emulator {
		t.Errorf("ConfigFromEnv without STORAGE_EMULATOR_HOST = %+v", c)
	}
}

func TestEndpointURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: "127.0.0.1:4443", want: "http://127.0.0.1:4443/storage/v1/"},
		{in: "http://127.0.0.1:4443", want: "http://127.0.0.1:4443/storage/v1/"},
		{in: "https://storage.example.com/", want: "https://storage.example.com/storage/v1/"},
		{in: "https://storage.example.com/storage/v1/", want: "https://storage.example.com/storage/v1/"},
	}
	for _, tt := range tests {
		if got, err := endpointURL(tt.in); err != nil || got != tt.want {
			t.Errorf("endpointURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestChunkSize(t *testing.T) {
	s := &Store{cfg: Config{ChunkSize: DefaultChunkSize}}
	tests := []struct {
		size int64
		want int
	}{
		{size: 0, want: chunkAlign},
		{size: 1, want: chunkAlign},
		{size: chunkAlign - 1, want: chunkAlign},
		{size: chunkAlign, want: 2 * chunkAlign}, // strictly above: one request
		{size: DefaultChunkSize - 1, want: DefaultChunkSize},
		{size: DefaultChunkSize, want: DefaultChunkSize},
		{size: 1 << 30, want: DefaultChunkSize},
	}
	for _, tt := range tests {
		if got := s.chunkSize(tt.size); got != tt.want {
			t.Errorf("chunkSize(%d) = %d, want %d", tt.size, got, tt.want)
		}
	}
}

// TestResumablePut: an object of ChunkSize or more goes up in chunks, with
// its CRC32C and preconditions.
func TestResumablePut(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.ChunkSize = chunkAlign })
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*chunkAlign/16+1000)
	info, err := s.Put(t.Context(), "big", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("Put = %+v, %v", info, err)
	}
	r, err := s.NewReader(t.Context(), "big", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("read back %d bytes, %v; want the %d bytes put", len(got), err, len(data))
	}
	_, err = s.Put(t.Context(), "big", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfAbsent: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Errorf("resumable Put(IfAbsent) over an existing key = %v, want ErrPrecondition", err)
	}
}
