package objstoretest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// This file holds the set-up helpers that drivers' tests share: opening a
// store for one test, and stores on canned HTTP answers or on a closed
// port, for the checks the conformance suite cannot make against a
// well-behaved server.

// Open returns the store that open makes, failing t when open fails, and
// closes the store when t ends.
func Open[S objstore.Store](t testing.TB, open func() (S, error)) S {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// CannedStore starts an HTTP server whose every request gets the answer of
// h and returns the store that open makes for the server's URL and
// client (see Open). The server and the store are closed when t ends.
func CannedStore[S objstore.Store](t testing.TB, h http.HandlerFunc, open func(url string, c *http.Client) (S, error)) S {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Open(t, func() (S, error) { return open(srv.URL, srv.Client()) })
}

// ClosedAddr returns "127.0.0.1:PORT" for a port where nobody listens (it
// was free a moment ago), for checks of transport errors.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// CheckShortBody checks that a body that ends cleanly before the promised
// range fails with io.ErrUnexpectedEOF (never a short io.EOF, never
// ErrNotFound). canned returns a store whose every request gets the answer
// of h; the answer is a 206 of bytes 0-99 of a 100-byte object with 50
// bytes of body and header, after which the reader's Info must show Size
// 100 and Version version, and the error must say how much of the body
// came ("50 of 100", as objstore.NewRangeReader's does).
func CheckShortBody(t *testing.T, canned func(t *testing.T, h http.HandlerFunc) objstore.Store, header http.Header, version string) {
	t.Helper()
	s := canned(t, func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Range", "bytes 0-99/100")
		w.WriteHeader(http.StatusPartialContent)
		w.Write([]byte(strings.Repeat("x", 50)))
		w.(http.Flusher).Flush() // chunked: no Content-Length to catch it
	})
	r, err := s.NewReader(t.Context(), "k", 0, 100, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Version != version || info.Size != 100 {
		t.Errorf("Info() = %+v, want Version %q and Size 100", info, version)
	}
	b, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("ReadAll = %d bytes, %v; want io.ErrUnexpectedEOF", len(b), err)
	}
	if err != nil && !strings.Contains(err.Error(), "50 of 100") {
		t.Errorf("error %v does not say how much of the body came", err)
	}
}
