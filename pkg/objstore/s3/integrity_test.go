package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// flipTransport corrupts one byte of every request body of at least 1 KiB
// (the length unchanged), as a faulty link or buggy middlebox would.
type flipTransport struct{ base http.RoundTripper }

func (f flipTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.ContentLength >= 1024 {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		b[len(b)/2] ^= 0xff
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	return f.base.RoundTrip(r)
}

// TestCorruptBodyRefused: bodies sent as UNSIGNED-PAYLOAD over plain HTTP
// (Puts, and parts of uploads with part checksums) are still verified by
// the server through their CRC32C: a byte flipped on the way is refused,
// never stored.
func TestCorruptBodyRefused(t *testing.T) {
	s, _ := minioStore(t, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: flipTransport{base: http.DefaultTransport}}
	})
	ctx := context.Background()
	data := randomBytes(4, minPartSize)
	for _, tc := range []struct {
		name string
		send func() error
	}{
		{name: "Put", send: func() error {
			_, err := s.Put(ctx, "put", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
			return err
		}},
		{name: "UploadPart", send: func() error {
			u, err := s.CreateUpload(ctx, "part", objstore.PutOptions{})
			if err != nil {
				return err
			}
			defer u.Abort(context.Background())
			return u.UploadPart(ctx, 1, bytes.NewReader(data), int64(len(data)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			t.Logf("%v", err)
			if err == nil {
				t.Fatal("a corrupted body was accepted")
			}
			if errors.Is(err, objstore.ErrNotFound) || !strings.Contains(strings.ToLower(err.Error()), "checksum") && !strings.Contains(err.Error(), "BadDigest") {
				t.Errorf("error = %v, want a checksum mismatch", err)
			}
		})
	}
	if _, err := s.Stat(ctx, "put"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat of the corrupted Put: %v, want not found", err)
	}
}
