package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// randomBytes returns n pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func readAll(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	r, err := s.NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader(%s): %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func objectTags(t *testing.T, s *Store, key string) map[string]string {
	t.Helper()
	out, err := s.client.GetObjectTagging(context.Background(), &s3.GetObjectTaggingInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		t.Fatalf("GetObjectTagging(%s): %v", key, err)
	}
	tags := map[string]string{}
	for _, tag := range out.TagSet {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	return tags
}

func TestTagsAndMetadata(t *testing.T) {
	s, _ := minioStore(t, nil)
	ctx := context.Background()
	tags := map[string]string{"nextflow.io/processName": "ALIGN_1 sample.bam", "run": "a+b=c @x:y"}
	meta := map[string]string{"Mixed-Case": "Value", "mode": "0644"}
	if _, err := s.Put(ctx, "put", strings.NewReader("x"), 1, objstore.PutOptions{Tags: tags, Metadata: meta, ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	if got := objectTags(t, s, "put"); !maps.Equal(got, tags) {
		t.Errorf("Put tags = %v, want %v", got, tags)
	}
	st, err := s.Stat(ctx, "put")
	if want := map[string]string{"mixed-case": "Value", "mode": "0644"}; err != nil || !maps.Equal(st.Metadata, want) {
		t.Errorf("Stat metadata = %v, %v; want lower-case keys %v", st.Metadata, err, want)
	}

	u, err := s.CreateUpload(ctx, "multi", objstore.PutOptions{Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UploadPart(ctx, 1, strings.NewReader("part"), 4); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := objectTags(t, s, "multi"); !maps.Equal(got, tags) {
		t.Errorf("multipart tags = %v, want %v", got, tags)
	}
}

func TestServerSideEncryption(t *testing.T) {
	kms := testenv.MinIO(t).KMSKeyID
	tests := []struct {
		name string
		cfg  func(*Config)
		want types.ServerSideEncryption
	}{
		{name: "SSE-S3", cfg: func(c *Config) { c.SSE = SSES3 }, want: types.ServerSideEncryptionAes256},
		{name: "SSE-KMS", cfg: func(c *Config) { c.SSE, c.SSEKMSKeyID = SSEKMS, kms }, want: types.ServerSideEncryptionAwsKms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := minioStore(t, tt.cfg)
			ctx := context.Background()
			data := []byte("secret data")
			if _, err := s.Put(ctx, "put", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Copy(ctx, "put", "copy", objstore.CopyOptions{}); err != nil {
				t.Fatal(err)
			}
			u, err := s.CreateUpload(ctx, "multi", objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := u.UploadPart(ctx, 1, bytes.NewReader(data), int64(len(data))); err != nil {
				t.Fatal(err)
			}
			if _, err := u.Complete(ctx); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"put", "copy", "multi"} {
				out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key)})
				if err != nil {
					t.Fatal(err)
				}
				if out.ServerSideEncryption != tt.want {
					t.Errorf("%s: ServerSideEncryption = %q, want %q", key, out.ServerSideEncryption, tt.want)
				}
				if got := readAll(t, s, key); !bytes.Equal(got, data) {
					t.Errorf("%s: read %q", key, got)
				}
			}
		})
	}
}

// TestMultipartChecksums uses CRC32C part checksums (the AWS default): parts
// upload and assemble; MinIO cannot copy into such an upload, which must
// come back as ErrUnsupported with a hint, not as a confusing 400.
func TestMultipartChecksums(t *testing.T) {
	on := true
	s, _ := minioStore(t, func(c *Config) { c.MultipartChecksums = &on })
	ctx := context.Background()
	data := randomBytes(1, minPartSize+1000)
	if _, err := s.Put(ctx, "src", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := s.CreateUpload(ctx, "dst", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Abort(context.Background()) })
	if err := u.UploadPart(ctx, 2, bytes.NewReader(data[minPartSize:]), 1000); err != nil {
		t.Fatal(err)
	}
	if err := u.UploadPart(ctx, 1, bytes.NewReader(data), minPartSize); err != nil {
		t.Fatal(err)
	}
	err = u.CopyPart(ctx, 3, "src", 0, 10)
	if err != nil && (!errors.Is(err, objstore.ErrUnsupported) || !strings.Contains(err.Error(), "MultipartChecksums")) {
		t.Fatalf("CopyPart into a checksummed upload = %v, want success or ErrUnsupported naming MultipartChecksums", err)
	}
	if err == nil {
		data = append(data, data[:10]...)
	}
	info, err := u.Complete(ctx)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if info.Size != int64(len(data)) {
		t.Errorf("Complete size = %d, want %d", info.Size, len(data))
	}
	if got := readAll(t, s, "dst"); !bytes.Equal(got, data) {
		t.Error("assembled object differs")
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String("dst"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(out.ChecksumCRC32C) == "" {
		t.Error("the object has no CRC32C checksum")
	}
}

// TestStreamChecksums: on a custom endpoint with MultipartChecksums unset,
// an upload that copies no parts has CRC32C part checksums (its parts sent
// as UNSIGNED-PAYLOAD over plain HTTP, the checksum verified by the
// server), and one created with CopyParts has none, so MinIO copies parts
// into it.
func TestStreamChecksums(t *testing.T) {
	s, _ := minioStore(t, nil)
	if !s.plainHTTP {
		t.Fatal("the MinIO endpoint is not plain HTTP")
	}
	ctx := context.Background()
	data := randomBytes(3, minPartSize+1000)
	if _, err := s.Put(ctx, "src", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		copyParts bool
		wantSum   bool
	}{
		{name: "stream", wantSum: true},
		{name: "copy", copyParts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := s.CreateUpload(ctx, tc.name, objstore.PutOptions{CopyParts: tc.copyParts})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { u.Abort(context.Background()) })
			if err := u.UploadPart(ctx, 1, bytes.NewReader(data), minPartSize); err != nil {
				t.Fatal(err)
			}
			if tc.copyParts {
				err = u.CopyPart(ctx, 2, "src", minPartSize, 1000)
			} else {
				err = u.UploadPart(ctx, 2, bytes.NewReader(data[minPartSize:]), 1000)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := u.Complete(ctx); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got := readAll(t, s, tc.name); !bytes.Equal(got, data) {
				t.Error("assembled object differs")
			}
			out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(tc.name), ChecksumMode: types.ChecksumModeEnabled})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(out.ChecksumCRC32C) != ""; got != tc.wantSum {
				t.Errorf("object has a CRC32C checksum: %v, want %v", got, tc.wantSum)
			}
		})
	}
}

// TestLargeCopy exercises the multipart copy used beyond 5 GiB, with the
// threshold lowered so that a small object takes that path.
func TestLargeCopy(t *testing.T) {
	s, _ := minioStore(t, nil)
	s.copyThreshold, s.copyPartSize = minPartSize, minPartSize
	ctx := context.Background()
	data := randomBytes(2, 2*minPartSize+12345)
	meta := map[string]string{"color": "blue"}
	tags := map[string]string{"team": "genomics"}
	src, err := s.Put(ctx, "src", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{Metadata: meta, Tags: tags, ContentType: "application/x-bam"})
	if err != nil {
		t.Fatal(err)
	}

	info, err := s.Copy(ctx, "src", "dst", objstore.CopyOptions{IfVersion: src.Version})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if info.Size != int64(len(data)) || info.Version == "" || !strings.HasSuffix(info.Version, "-3") {
		t.Errorf("Copy = %+v, want size %d and a 3-part version", info, len(data))
	}
	if got := readAll(t, s, "dst"); !bytes.Equal(got, data) {
		t.Error("copy differs from the source")
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String("dst")})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(lowerKeys(out.Metadata), meta) || aws.ToString(out.ContentType) != "application/x-bam" {
		t.Errorf("copy has metadata %v, content type %q", out.Metadata, aws.ToString(out.ContentType))
	}
	if got := objectTags(t, s, "dst"); !maps.Equal(got, tags) {
		t.Errorf("copy tags = %v, want %v", got, tags)
	}

	repl := map[string]string{"shape": "round"}
	if _, err := s.Copy(ctx, "src", "dst2", objstore.CopyOptions{Metadata: repl}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stat(ctx, "dst2"); !maps.Equal(st.Metadata, repl) {
		t.Errorf("copy with new metadata has %v", st.Metadata)
	}

	_, err = s.Copy(ctx, "src", "dst3", objstore.CopyOptions{IfVersion: "stale"})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Errorf("Copy with a stale version = %v, want ErrPrecondition", err)
	}
	if n := pendingUploads(t, s); n != 0 {
		t.Errorf("%d multipart uploads left behind", n)
	}
}

// TestLimitsRefusedLocally: requests beyond S3's limits fail before any
// network traffic (the endpoint is unreachable) with a final error.
func TestLimitsRefusedLocally(t *testing.T) {
	s := testStore(t, "http://127.0.0.1:1", nil)
	ctx := context.Background()
	_, err := s.Put(ctx, "k", bytes.NewReader(nil), maxSinglePut+1, objstore.PutOptions{})
	if !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("Put above 5 GiB = %v, want ErrUnsupported", err)
	}
	_, err = s.NewReader(ctx, "k", -1, 10, objstore.ReadOptions{})
	if !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("NewReader at a negative offset = %v, want ErrUnsupported", err)
	}
	u := &upload{s: s, key: "k", id: "id", parts: map[int32]part{}}
	for _, n := range []int{0, maxParts + 1} {
		if err := u.UploadPart(ctx, n, bytes.NewReader(nil), 0); !errors.Is(err, objstore.ErrUnsupported) {
			t.Errorf("UploadPart(%d) = %v, want ErrUnsupported", n, err)
		}
	}
	if err := u.CopyPart(ctx, 1, "src", 0, 0); !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("CopyPart of an empty range = %v, want ErrUnsupported", err)
	}
}

func TestMissingBucketAndBadCredentials(t *testing.T) {
	srv := testenv.MinIO(t)
	ctx := context.Background()
	missing := testStore(t, srv.Endpoint, func(c *Config) {
		c.Bucket = "ferry-no-such-bucket"
		c.AccessKeyID, c.SecretAccessKey = srv.AccessKey, srv.SecretKey
	})
	if _, err := missing.List(ctx, objstore.ListOptions{}); !errors.Is(err, objstore.ErrNoBucket) {
		t.Errorf("List of a missing bucket = %v, want ErrNoBucket", err)
	}
	if _, err := missing.Put(ctx, "k", strings.NewReader("x"), 1, objstore.PutOptions{}); !errors.Is(err, objstore.ErrNoBucket) {
		t.Errorf("Put into a missing bucket = %v, want ErrNoBucket", err)
	}
	if _, err := missing.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat in a missing bucket = %v, want ErrNotFound", err)
	}

	good, _ := minioStore(t, nil)
	bad := testStore(t, srv.Endpoint, func(c *Config) {
		c.Bucket = good.bucket
		c.AccessKeyID, c.SecretAccessKey = srv.AccessKey, "wrong-secret"
	})
	if _, err := bad.List(ctx, objstore.ListOptions{}); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("List with a wrong secret = %v, want ErrPermission", err)
	}
	if _, err := bad.Stat(ctx, "k"); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Stat with a wrong secret = %v, want ErrPermission", err)
	}
	if err := bad.Delete(ctx, "k", objstore.DeleteOptions{}); !errors.Is(err, objstore.ErrPermission) {
		t.Errorf("Delete with a wrong secret = %v, want ErrPermission", err)
	}
}

// TestCopyKeepsHeaders: a metadata update (self-copy with REPLACE) and a
// multipart copy keep the standard headers someone else set.
func TestCopyKeepsHeaders(t *testing.T) {
	s, _ := minioStore(t, nil)
	ctx := context.Background()
	data := randomBytes(4, minPartSize+10)
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String("src"), Body: bytes.NewReader(data),
		ContentType: aws.String("text/csv"), ContentEncoding: aws.String("gzip"),
		CacheControl: aws.String("max-age=60"), ContentDisposition: aws.String("attachment"),
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(key string) {
		t.Helper()
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{aws.ToString(out.ContentType), aws.ToString(out.ContentEncoding), aws.ToString(out.CacheControl), aws.ToString(out.ContentDisposition)}
		want := []string{"text/csv", "gzip", "max-age=60", "attachment"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: headers = %q, want %q", key, got, want)
				break
			}
		}
	}
	if _, err := s.Copy(ctx, "src", "src", objstore.CopyOptions{Metadata: map[string]string{"mode": "0600"}}); err != nil {
		t.Fatal(err)
	}
	check("src")
	s.copyThreshold, s.copyPartSize = minPartSize, minPartSize
	if _, err := s.Copy(ctx, "src", "big", objstore.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	check("big")
}
