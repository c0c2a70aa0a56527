package testenv

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestToxiproxy(t *testing.T) {
	srv := MinIO(t)
	bucket := srv.NewBucket(t)
	body := strings.Repeat("0123456789", 10000) // 100 kB
	putGet(t, srv, bucket, "k", body)

	p := Toxiproxy(t, srv.Endpoint)
	if !strings.HasPrefix(p.Endpoint, "http://127.0.0.1:") || p.Endpoint == srv.Endpoint {
		t.Fatalf("proxy endpoint = %q", p.Endpoint)
	}
	// SigV4 signs the proxy's host; MinIO accepts it.
	via := &S3Server{Endpoint: p.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region}
	timeout := 5 * time.Second
	get := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		resp, err := via.Do(ctx, http.MethodGet, "/"+bucket+"/k", nil, nil, nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := get(); err != nil || got != body {
		t.Fatalf("through the proxy: %d bytes, %v", len(got), err)
	}

	t.Run("latency", func(t *testing.T) {
		name := p.AddLatency(t, 300*time.Millisecond, 0)
		start := time.Now()
		if got, err := get(); err != nil || got != body {
			t.Fatalf("with latency: %d bytes, %v", len(got), err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("request took %v, want >= 300ms", d)
		}
		p.RemoveToxic(t, name)
	})
	t.Run("limit_data", func(t *testing.T) {
		p.AddLimitData(t, 5000)
		got, err := get()
		if err == nil || len(got) >= len(body) {
			t.Fatalf("cut body: %d bytes, err %v; want a short read error", len(got), err)
		}
		p.RemoveAllToxics(t)
		if got, err := get(); err != nil || got != body {
			t.Fatalf("after removing toxics: %d bytes, %v", len(got), err)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		p.SetEnabled(t, false)
		if _, err := get(); err == nil {
			t.Fatal("request through a disabled proxy succeeded")
		}
		p.SetEnabled(t, true)
		if got, err := get(); err != nil || got != body {
			t.Fatalf("re-enabled: %d bytes, %v", len(got), err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		p.AddTimeout(t, 0)
		timeout = 500 * time.Millisecond
		_, err := get()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung proxy: err = %v, want deadline exceeded", err)
		}
		p.RemoveAllToxics(t)
	})
}
