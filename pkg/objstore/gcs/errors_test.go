package gcs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// cannedStore returns a Store whose every request gets the answer of h.
func cannedStore(t *testing.T, h http.HandlerFunc) *Store {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s, err := New(t.Context(), Config{Bucket: "bkt", Endpoint: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// jsonError is a GCS JSON API error body.
func jsonError(status int, reason, msg string) string {
	return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"errors":[{"domain":"global","reason":%q,"message":%q}]}}`,
		status, msg, reason, msg)
}

// ops runs each Store operation on key "k" and returns its error.
var ops = []struct {
	name string
	call func(ctx context.Context, s *Store) error
}{
	{name: "Stat", call: func(ctx context.Context, s *Store) error { _, err := s.Stat(ctx, "k"); return err }},
	{name: "NewReader", call: func(ctx context.Context, s *Store) error {
		r, err := s.NewReader(ctx, "k", 0, 10, objstore.ReadOptions{})
		if err == nil {
			r.Close()
		}
		return err
	}},
	{name: "List", call: func(ctx context.Context, s *Store) error {
		_, err := s.List(ctx, objstore.ListOptions{Delimiter: "/"})
		return err
	}},
	{name: "Put", call: func(ctx context.Context, s *Store) error {
		_, err := s.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{})
		return err
	}},
	{name: "Copy", call: func(ctx context.Context, s *Store) error {
		_, err := s.Copy(ctx, "k", "k2", objstore.CopyOptions{})
		return err
	}},
	{name: "Delete", call: func(ctx context.Context, s *Store) error {
		return s.Delete(ctx, "k", objstore.DeleteOptions{IfVersion: "5"})
	}},
}

func TestErrorMapping(t *testing.T) {
	const objectMsg, bucketMsg = "No such object: bkt/k", "The specified bucket does not exist."
	tests := []struct {
		name   string
		status int
		reason string
		msg    string
		want   map[string]error // op → sentinel; ops not listed expect wantAll
		all    error
	}{
		{name: "object not found", status: 404, reason: "notFound", msg: objectMsg, all: objstore.ErrNotFound,
			want: map[string]error{"List": objstore.ErrNoBucket, "Put": objstore.ErrNoBucket, "Delete": objstore.ErrPrecondition}},
		{name: "bucket not found", status: 404, reason: "notFound", msg: bucketMsg, all: objstore.ErrNoBucket},
		{name: "precondition", status: 412, reason: "conditionNotMet", msg: "At least one of the pre-conditions you specified did not hold.", all: objstore.ErrPrecondition},
		{name: "unauthenticated", status: 401, reason: "required", msg: "Login Required.", all: objstore.ErrPermission},
		{name: "forbidden", status: 403, reason: "forbidden", msg: "no storage.objects.get access", all: objstore.ErrPermission},
		{name: "rate limited", status: 429, reason: "rateLimitExceeded", msg: "slow down", all: objstore.ErrThrottled},
		{name: "unavailable", status: 503, reason: "backendError", msg: "try again", all: objstore.ErrThrottled},
		{name: "server error", status: 500, reason: "internalError", msg: "oops", all: nil},
	}
	sentinels := []error{objstore.ErrNotFound, objstore.ErrNoBucket, objstore.ErrPrecondition,
		objstore.ErrPermission, objstore.ErrThrottled, objstore.ErrUnsupported}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("X-GUploader-UploadID", "req-"+strconv.Itoa(tt.status))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				io.WriteString(w, jsonError(tt.status, tt.reason, tt.msg))
			})
			for _, op := range ops {
				want, ok := tt.want[op.name]
				if !ok {
					want = tt.all
				}
				err := op.call(t.Context(), s)
				var oe *objstore.Error
				if !errors.As(err, &oe) {
					t.Fatalf("%s: error %v (%T) is no *objstore.Error", op.name, err, err)
				}
				if oe.Provider != "gs" || oe.Op != op.name || oe.Bucket != "bkt" || (oe.Key == "") != (op.name == "List") {
					t.Errorf("%s: error fields {%q %q %q %q}", op.name, oe.Provider, oe.Op, oe.Bucket, oe.Key)
				}
				if oe.Status != tt.status || oe.RequestID != "req-"+strconv.Itoa(tt.status) || oe.Code != tt.reason {
					t.Errorf("%s: Status %d RequestID %q Code %q, want %d req-%d %q",
						op.name, oe.Status, oe.RequestID, oe.Code, tt.status, tt.status, tt.reason)
				}
				for _, sen := range sentinels {
					wantIs := want != nil && errors.Is(want, sen)
					if errors.Is(err, sen) != wantIs {
						t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", op.name, err, sen, !wantIs, wantIs)
					}
				}
				if retry := objstore.Retryable(err); retry != (tt.status >= 429) {
					t.Errorf("%s: Retryable = %v for HTTP %d", op.name, retry, tt.status)
				}
			}
		})
	}
}

// TestDeleteMissingIsNil: a 404 without IfVersion is success.
func TestDeleteMissingIsNil(t *testing.T) {
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(404)
		io.WriteString(w, jsonError(404, "notFound", "No such object: bkt/k"))
	})
	if err := s.Delete(t.Context(), "k", objstore.DeleteOptions{}); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
}

// TestNetworkErrorIsNotNotFound: a refused connection is a transport error:
// retryable, no HTTP status, never ErrNotFound.
func TestNetworkErrorIsNotNotFound(t *testing.T) {
	port, err := testenv.FreePort() // nobody listens there
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), Config{Bucket: "bkt", Endpoint: "127.0.0.1:" + strconv.Itoa(port), HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, op := range ops {
		err := op.call(t.Context(), s)
		var oe *objstore.Error
		switch {
		case err == nil:
			t.Errorf("%s: succeeded against a closed port", op.name)
		case errors.Is(err, objstore.ErrNotFound):
			t.Errorf("%s: %v wraps ErrNotFound", op.name, err)
		case !errors.As(err, &oe) || oe.Status != 0 || oe.Kind != nil:
			t.Errorf("%s: %v: want an *objstore.Error without status or sentinel", op.name, err)
		case !objstore.Retryable(err):
			t.Errorf("%s: %v is not retryable", op.name, err)
		}
	}
}

// TestShortBody: a body that ends cleanly before the promised range is
// io.ErrUnexpectedEOF, not a short io.EOF.
func TestShortBody(t *testing.T) {
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Range", "bytes 0-99/100")
		w.Header().Set("X-Goog-Generation", "7")
		w.WriteHeader(http.StatusPartialContent)
		w.Write(bytes.Repeat([]byte("x"), 50))
		w.(http.Flusher).Flush() // chunked: no Content-Length to catch it
	})
	r, err := s.NewReader(t.Context(), "k", 0, 100, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if v := r.Info().Version; v != "7" {
		t.Errorf("Info().Version = %q, want 7", v)
	}
	b, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadAll = %d bytes, %v; want io.ErrUnexpectedEOF", len(b), err)
	}
	if errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "50 of 100") {
		t.Errorf("error %v", err)
	}
}

func TestBodyCode(t *testing.T) {
	tests := []struct{ body, want string }{
		{body: jsonError(404, "notFound", "x"), want: "notFound"},
		{body: `<?xml version='1.0'?><Error><Code>NoSuchBucket</Code></Error>`, want: "NoSuchBucket"},
		{body: "Not Found", want: ""},
		{body: "", want: ""},
	}
	for _, tt := range tests {
		if got := bodyCode(tt.body); got != tt.want {
			t.Errorf("bodyCode(%q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

// TestPutSendsCRC32C: a small Put is one multipart request that carries
// the object's CRC32C, so GCS rejects corrupted bodies.
func TestPutSendsCRC32C(t *testing.T) {
	var requests []string
	var body []byte
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		requests = append(requests, r.Method+" "+r.URL.Query().Get("uploadType"))
		body, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"k","bucket":"bkt","size":"11","generation":"5","updated":"2026-01-02T03:04:05Z"}`)
	})
	data := []byte("hello world")
	info, err := s.Put(t.Context(), "k", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "5" || info.Size != 11 || info.ModTime.IsZero() {
		t.Errorf("Put = %+v", info)
	}
	if len(requests) != 1 || requests[0] != "POST multipart" {
		t.Errorf("requests = %q, want one multipart POST", requests)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(data, crc32cTable))
	if want := `"crc32c":"` + base64.StdEncoding.EncodeToString(sum[:]) + `"`; !bytes.Contains(body, []byte(want)) {
		t.Errorf("upload body lacks %s:\n%s", want, body)
	}
}

// TestListServerDelimiter checks the real-GCS listing path (server-side
// delimiter, maxResults, pageToken) on canned answers.
func TestListServerDelimiter(t *testing.T) {
	var query url.Values
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"items":[{"name":"p/a","size":"4","generation":"3","updated":"2026-01-02T03:04:05Z"}],`+
			`"prefixes":["p/d/","p/f.ferry-part/"],"nextPageToken":"tok2"}`)
	})
	page, err := s.List(t.Context(), objstore.ListOptions{Prefix: "p/", Delimiter: "/", MaxKeys: 3, Token: "tok1"})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"prefix": "p/", "delimiter": "/", "maxResults": "3", "pageToken": "tok1"} {
		if got := query.Get(k); got != want {
			t.Errorf("query %s = %q, want %q", k, got, want)
		}
	}
	if len(page.Objects) != 1 || page.Objects[0].Key != "p/a" || page.Objects[0].Size != 4 || page.Objects[0].Version != "3" {
		t.Errorf("Objects = %+v", page.Objects)
	}
	if len(page.Prefixes) != 1 || page.Prefixes[0] != "p/d/" || page.NextToken != "tok2" {
		t.Errorf("Prefixes = %q NextToken = %q, want [p/d/] tok2", page.Prefixes, page.NextToken)
	}
}
