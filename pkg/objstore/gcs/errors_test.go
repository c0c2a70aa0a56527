package gcs

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// jsonError is a GCS JSON API error body.
func jsonError(status int, reason, msg string) string {
	return fmt.Sprintf(`{"error":{"code":%d,"message":%q,"errors":[{"domain":"global","reason":%q,"message":%q}]}}`,
		status, msg, reason, msg)
}

// cannedStore returns a Store whose every request gets the answer of h.
func cannedStore(t *testing.T, h http.HandlerFunc) *Store {
	t.Helper()
	return objstoretest.CannedStore(t, h, func(url string, c *http.Client) (*Store, error) {
		return New(t.Context(), Config{Bucket: "bkt", Endpoint: url, HTTPClient: c})
	})
}

// ops are the Store operations the error tests run, each on key "k".
var ops = objstoretest.ErrorOps("5")

func TestErrorMapping(t *testing.T) {
	const objectMsg, bucketMsg = "No such object: bkt/k", "The specified bucket does not exist."
	m := objstoretest.ErrorMapping{Provider: "gs", Bucket: "bkt", Ops: ops, Canned: cannedError}
	objstoretest.CheckErrorMapping(t, m, []objstoretest.ErrorCase{
		{Name: "object not found", Status: 404, Code: "notFound", Message: objectMsg, Want: objstore.ErrNotFound,
			Except: map[string]error{"List": objstore.ErrNoBucket, "Put": objstore.ErrNoBucket, "Delete": objstore.ErrPrecondition}},
		{Name: "bucket not found", Status: 404, Code: "notFound", Message: bucketMsg, Want: objstore.ErrNoBucket},
		{Name: "precondition", Status: 412, Code: "conditionNotMet", Message: "At least one of the pre-conditions you specified did not hold.", Want: objstore.ErrPrecondition},
		{Name: "unauthenticated", Status: 401, Code: "required", Message: "Login Required.", Want: objstore.ErrPermission},
		{Name: "forbidden", Status: 403, Code: "forbidden", Message: "no storage.objects.get access", Want: objstore.ErrPermission},
		{Name: "rate limited", Status: 429, Code: "rateLimitExceeded", Message: "slow down", Want: objstore.ErrThrottled},
		{Name: "unavailable", Status: 503, Code: "backendError", Message: "try again", Want: objstore.ErrThrottled},
		{Name: "server error", Status: 500, Code: "internalError", Message: "oops", Want: nil},
	})
}

// cannedError returns a store whose every request gets the canned error
// answer of c, with request id reqID.
func cannedError(t *testing.T, c objstoretest.ErrorCase, reqID string) objstore.Store {
	return cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-GUploader-UploadID", reqID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.Status)
		io.WriteString(w, jsonError(c.Status, c.Code, c.Message))
	})
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
	s := objstoretest.Open(t, func() (*Store, error) {
		return New(t.Context(), Config{Bucket: "bkt", Endpoint: objstoretest.ClosedAddr(t), HTTPClient: &http.Client{}})
	})
	objstoretest.CheckNetworkErrors(t, s, ops)
}

// TestShortBody: a body that ends cleanly before the promised range is
// io.ErrUnexpectedEOF, not a short io.EOF.
func TestShortBody(t *testing.T) {
	objstoretest.CheckShortBody(t, func(t *testing.T, h http.HandlerFunc) objstore.Store { return cannedStore(t, h) },
		http.Header{"X-Goog-Generation": {"7"}}, "7")
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
