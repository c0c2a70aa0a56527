package s3

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// minioStore returns a store on a fresh bucket of the shared MinIO server.
func minioStore(t *testing.T, mod func(*Config)) (*Store, *testenv.S3Server) {
	t.Helper()
	srv := testenv.MinIO(t)
	cfg := Config{
		Bucket:          srv.NewBucket(t),
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, srv
}

// pendingUploads counts the bucket's multipart uploads in progress.
func pendingUploads(t *testing.T, st objstore.Store) int {
	t.Helper()
	s := st.(*Store)
	n := 0
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket}
	for {
		out, err := s.client.ListMultipartUploads(context.Background(), in)
		if err != nil {
			t.Fatalf("ListMultipartUploads: %v", err)
		}
		n += len(out.Uploads)
		if !aws.ToBool(out.IsTruncated) {
			return n
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
