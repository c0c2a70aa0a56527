package s3

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// setEnv applies a full environment (as testenv.S3Server.Env returns it)
// for the test: AWS and FUSION_AWS variables not in env are cleared.
func setEnv(t *testing.T, env []string) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "FUSION_AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestEnvironmentLikeNextflow configures the store the way a task
// container is: AWS_S3_ENDPOINT and credentials in the environment,
// credentials found by the SDK's default chain.
func TestEnvironmentLikeNextflow(t *testing.T) {
	srv := testenv.MinIO(t)
	bucket := srv.NewBucket(t)
	setEnv(t, srv.Env())
	cfg := ConfigFromEnv()
	cfg.Bucket = bucket
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New(%v): %v", cfg, err)
	}
	defer s.Close()
	if _, err := s.Put(context.Background(), "k", strings.NewReader("v"), 1, objstore.PutOptions{}); err != nil {
		t.Fatalf("Put with env credentials: %v", err)
	}
	if got := string(readAll(t, s, "k")); got != "v" {
		t.Errorf("read %q", got)
	}
}

// TestCABundle: the AWS_CA_BUNDLE this machine exports must not break
// plain-HTTP endpoints, and an unreadable one fails New clearly.
func TestCABundle(t *testing.T) {
	srv := testenv.MinIO(t)
	bucket := srv.NewBucket(t)
	pem := "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(pem); err != nil {
		t.Fatalf("system CA bundle: %v", err)
	}
	cfg := Config{Bucket: bucket, Endpoint: srv.Endpoint, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}

	t.Run("readable", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", pem)
		s, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("New with AWS_CA_BUNDLE: %v", err)
		}
		defer s.Close()
		if _, err := s.List(context.Background(), objstore.ListOptions{}); err != nil {
			t.Fatalf("List with AWS_CA_BUNDLE set: %v", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem")
		_, err := New(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "AWS_CA_BUNDLE") {
			t.Fatalf("New with a missing AWS_CA_BUNDLE = %v, want an error naming it", err)
		}
	})
	t.Run("own HTTP client", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", pem)
		c := cfg
		c.HTTPClient = &http.Client{}
		s, err := New(context.Background(), c)
		if err != nil {
			t.Fatalf("New with AWS_CA_BUNDLE and an http.Client: %v", err)
		}
		defer s.Close()
		if _, err := s.List(context.Background(), objstore.ListOptions{}); err != nil {
			t.Fatalf("List: %v", err)
		}
	})
}
