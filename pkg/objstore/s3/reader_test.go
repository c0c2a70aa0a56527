package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// shortBodyTransport answers every request with a 200 that promises
// Content-Length 100 but whose body ends cleanly after 40 bytes, the way a
// proxy that drops the connection can look to the client.
type shortBodyTransport struct{}

func (shortBodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("Content-Length", "100")
	h.Set("ETag", `"v1"`)
	h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	return &http.Response{
		StatusCode:    http.StatusOK,
		Header:        h,
		ContentLength: 100,
		Body:          io.NopCloser(strings.NewReader(strings.Repeat("x", 40))),
		Request:       r,
	}, nil
}

func TestReaderDetectsShortBody(t *testing.T) {
	s := testStore(t, "http://s3.test", func(c *Config) {
		c.HTTPClient = &http.Client{Transport: shortBodyTransport{}}
	})
	r, err := s.NewReader(context.Background(), "key", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 40 {
		t.Fatalf("ReadAll = %d bytes, %v; want 40 bytes and io.ErrUnexpectedEOF", len(b), err)
	}
	if !objstore.Retryable(err) {
		t.Errorf("a cut body is not retryable: %v", err)
	}
	if _, err2 := r.Read(make([]byte, 1)); !errors.Is(err2, io.ErrUnexpectedEOF) {
		t.Errorf("Read after the failure = %v, want the same error again", err2)
	}
}

// object is the content the fake servers below serve.
var object = []byte(strings.Repeat("0123456789", 100)) // 1000 bytes

func TestReaderConnectionCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusOK)
		w.Write(object[:300])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	s := testStore(t, srv.URL, nil)
	r, err := s.NewReader(context.Background(), "key", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 300 {
		t.Fatalf("ReadAll = %d bytes, %v; want 300 bytes and io.ErrUnexpectedEOF", len(b), err)
	}
	var e *objstore.Error
	if !errors.As(err, &e) || e.Op != "Read" || e.Key != "key" {
		t.Errorf("error = %#v, want an *objstore.Error for Read of key", err)
	}
}

// TestReaderServerIgnoresRange: a server that answers a ranged GET with
// the whole object (200) still yields exactly the range.
func TestReaderServerIgnoresRange(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.Write(object)
	}))
	t.Cleanup(srv.Close)
	s := testStore(t, srv.URL, nil)
	tests := []struct {
		off, length int64
		want        []byte
	}{
		{off: 10, length: 20, want: object[10:30]},
		{off: 990, length: 100, want: object[990:]},
		{off: 500, length: -1, want: object[500:]},
		{off: 1000, length: 5, want: nil},
		{off: 2000, length: -1, want: nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d+%d", tt.off, tt.length), func(t *testing.T) {
			r, err := s.NewReader(context.Background(), "key", tt.off, tt.length, objstore.ReadOptions{})
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			defer r.Close()
			b, err := io.ReadAll(r)
			if err != nil || string(b) != string(tt.want) {
				t.Fatalf("read %q, %v; want %q", b, err, tt.want)
			}
			if info := r.Info(); info.Size != int64(len(object)) || info.Version != "v1" {
				t.Errorf("Info = %+v", info)
			}
		})
	}
}

// TestReaderStallTimesOut: a body that stops arriving fails the Read after
// RequestTimeout instead of hanging.
func TestReaderStallTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusOK)
		w.Write(object[:100])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := testStore(t, srv.URL, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	r, err := s.NewReader(context.Background(), "key", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	start := time.Now()
	b, err := io.ReadAll(r)
	if !errors.Is(err, errReadTimeout) || len(b) != 100 {
		t.Fatalf("ReadAll = %d bytes, %v; want 100 bytes and a read timeout", len(b), err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stalled read took %v", d)
	}
	if !objstore.Retryable(err) || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("read timeout %v: want retryable, not ErrNotFound", err)
	}
}

// TestReaderSlowConsumer: time spent between Reads by the caller does not
// count against RequestTimeout.
func TestReaderSlowConsumer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.Write(object)
	}))
	t.Cleanup(srv.Close)
	s := testStore(t, srv.URL, func(c *Config) { c.RequestTimeout = 100 * time.Millisecond })
	r, err := s.NewReader(context.Background(), "key", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	defer r.Close()
	buf := make([]byte, 10)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	rest, err := io.ReadAll(r)
	if err != nil || len(rest) != len(object)-10 {
		t.Fatalf("after a pause: %d bytes, %v", len(rest), err)
	}
}

func TestContentRangeTotal(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{in: "bytes 0-99/1000", want: 1000, ok: true},
		{in: "bytes */1000", want: 1000, ok: true},
		{in: "bytes 0-99/*", ok: false},
		{in: "", ok: false},
		{in: "bytes 0-99/x", ok: false},
	}
	for _, tt := range tests {
		got, ok := contentRangeTotal(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("contentRangeTotal(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestReaderCloseDuringRead: Close unblocks a Read stuck on a silent server.
func TestReaderCloseDuringRead(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := testStore(t, srv.URL, nil)
	r, err := s.NewReader(context.Background(), "key", 0, -1, objstore.ReadOptions{})
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	done := make(chan error, 1)
	go func() { // owner: this test; it waits for the result below
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	r.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Read after a concurrent Close succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the Read")
	}
}

// TestReaderReusesConnections: range reads, even ones closed before their
// end, share one keep-alive connection.
func TestReaderReusesConnections(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		var off, end int
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &off, &end); err != nil {
			off, end = 0, len(object)-1
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, end, len(object)))
		w.Header().Set("Content-Length", strconv.Itoa(end-off+1))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(object[off : end+1])
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := testStore(t, srv.URL, nil)
	for i := range 20 {
		r, err := s.NewReader(context.Background(), "key", int64(i*10), 100, objstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			_, err = io.ReadAll(r)
		} else {
			_, err = io.ReadFull(r, make([]byte, 10)) // closed with 90 bytes unread
		}
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Errorf("20 sequential range reads opened %d connections, want 1", conns)
	}
}
