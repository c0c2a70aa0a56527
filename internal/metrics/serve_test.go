package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	reg := NewRegistry()
	b := NewBackend(reg)
	b.Observe(Call{Op: "Stat", Backend: "mem", Result: ResultOK, Duration: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := Serve(ctx, "127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	tests := []struct {
		path     string
		status   int
		contains string
	}{
		{"/metrics", http.StatusOK, `ferry_backend_requests_total{backend="mem",op="Stat",result="ok"} 1`},
		{"/metrics", http.StatusOK, "go_goroutines"},
		{"/", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		resp, err := http.Get("http://" + srv.Addr() + tt.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: status %d, want %d", tt.path, resp.StatusCode, tt.status)
		}
		if !strings.Contains(string(body), tt.contains) {
			t.Errorf("GET %s: body lacks %q", tt.path, tt.contains)
		}
	}

	// The address is taken: Serve reports the bind error.
	if s2, err := Serve(ctx, srv.Addr(), reg); err == nil {
		s2.Close()
		t.Error("second Serve on the same address succeeded")
	}

	// Cancelling ctx stops the listener; Close then returns at once.
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still open after ctx was cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
