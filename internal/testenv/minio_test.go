package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// putGet stores body at bucket/key through srv and reads it back.
func putGet(t *testing.T, srv *S3Server, bucket, key, body string) {
	t.Helper()
	ctx := context.Background()
	resp, err := srv.Do(ctx, http.MethodPut, "/"+bucket+"/"+key, nil, nil, []byte(body))
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: HTTP %d: %s", resp.StatusCode, b)
	}
	got := getBody(t, srv, bucket, key)
	if got != body {
		t.Fatalf("get = %q, want %q", got, body)
	}
}

func getBody(t *testing.T, srv *S3Server, bucket, key string) string {
	t.Helper()
	resp, err := srv.Do(context.Background(), http.MethodGet, "/"+bucket+"/"+key, nil, nil, nil)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("get: HTTP %d, %v: %s", resp.StatusCode, err, b)
	}
	return string(b)
}

func TestMinIOBucketAndSigning(t *testing.T) {
	srv := MinIO(t)
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") || srv.Region != "us-east-1" {
		t.Fatalf("server = %+v", srv)
	}
	bucket := srv.NewBucket(t)
	// Keys that need escaping in the path and in the signature.
	for _, key := range []string{"plain", "dir/with space+plus", "ünï/çödé~(1)"} {
		putGet(t, srv, bucket, key, "body of "+key)
	}
	// A signed query string (list with a prefix that needs escaping).
	q := url.Values{"list-type": {"2"}, "prefix": {"dir/with space"}}
	resp, err := srv.Do(context.Background(), http.MethodGet, "/"+bucket, q, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<Key>dir/with space+plus</Key>") {
		t.Fatalf("list: HTTP %d: %s", resp.StatusCode, b)
	}
	if MinIO(t) != srv {
		t.Fatal("MinIO started a second server")
	}
}

func TestBucketName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, name := range []string{"a", "Some_Test/with:odd chars--", strings.Repeat("long", 40), "ÄÖÜ"} {
		t.Run(name, func(t *testing.T) {
			a, b := BucketName(t), BucketName(t)
			if !valid.MatchString(a) || strings.Contains(a, "--") {
				t.Fatalf("BucketName = %q: not a valid bucket name", a)
			}
			if a == b {
				t.Fatalf("BucketName returned %q twice", a)
			}
		})
	}
}

func TestMinIOEnv(t *testing.T) {
	srv := MinIO(t)
	t.Setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem")
	t.Setenv("AWS_PROFILE", "elsewhere")
	t.Setenv("FUSION_AWS_REGION", "eu-west-1")
	env := map[string]string{}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Errorf("Env has %s twice", k)
		}
		env[k] = v
	}
	want := map[string]string{
		"AWS_S3_ENDPOINT":       srv.Endpoint,
		"AWS_ACCESS_KEY_ID":     "minioadmin",
		"AWS_SECRET_ACCESS_KEY": "minioadmin",
		"AWS_REGION":            "us-east-1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("Env %s = %q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"AWS_CA_BUNDLE", "AWS_PROFILE", "FUSION_AWS_REGION"} {
		if _, ok := env[k]; ok {
			t.Errorf("Env keeps %s", k)
		}
	}
	if env["PATH"] == "" {
		t.Error("Env dropped PATH")
	}
}

// The outage tests change the shared server's state: not parallel.
func TestMinIOStopStart(t *testing.T) {
	srv := MinIO(t)
	bucket := srv.NewBucket(t)
	putGet(t, srv, bucket, "k", "survives a restart")

	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := srv.Do(ctx, http.MethodGet, "/"+bucket+"/k", nil, nil, nil)
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("request to a stopped server: err = %v, want a connection error", err)
	}
	srv.Start(t)
	if got := getBody(t, srv, bucket, "k"); got != "survives a restart" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestMinIOPauseResume(t *testing.T) {
	srv := MinIO(t)
	bucket := srv.NewBucket(t)
	putGet(t, srv, bucket, "k", "v")

	srv.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := srv.Do(ctx, http.MethodGet, "/"+bucket+"/k", nil, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request to a paused server: err = %v, want deadline exceeded", err)
	}
	srv.Resume(t)
	if got := getBody(t, srv, bucket, "k"); got != "v" {
		t.Fatalf("after resume: %q", got)
	}
}
