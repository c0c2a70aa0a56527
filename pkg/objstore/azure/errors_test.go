package azure

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// cannedStore returns a shared-key Store whose every request gets the
// answer of h.
func cannedStore(t *testing.T, h http.HandlerFunc) *Store {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s, err := New(t.Context(), Config{
		Account:    testenv.AzuriteAccount,
		AccountKey: testenv.AzuriteKey,
		Endpoint:   srv.URL + "/" + testenv.AzuriteAccount,
		Container:  "cont",
		HTTPClient: srv.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
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
		return s.Delete(ctx, "k", objstore.DeleteOptions{IfVersion: `"0x1"`})
	}},
}

func TestErrorMapping(t *testing.T) {
	var (
		notFound   = objstore.ErrNotFound
		noBucket   = objstore.ErrNoBucket
		failed     = objstore.ErrPrecondition
		permission = objstore.ErrPermission
		throttled  = objstore.ErrThrottled
	)
	tests := []struct {
		name   string
		status int
		code   string
		all    error            // what every op wraps…
		except map[string]error // …but these
	}{
		{name: "blob not found", status: 404, code: "BlobNotFound", all: notFound, except: map[string]error{"Delete": failed}},
		{name: "container not found", status: 404, code: "ContainerNotFound", all: noBucket},
		{name: "condition not met", status: 412, code: "ConditionNotMet", all: failed},
		{name: "source condition not met", status: 412, code: "SourceConditionNotMet", all: failed},
		{name: "if-none-match on existing blob", status: 409, code: "BlobAlreadyExists", all: failed},
		{name: "other conflict", status: 409, code: "LeaseIdMissing", all: nil},
		{name: "unauthenticated", status: 401, code: "NoAuthenticationInformation", all: permission},
		{name: "forbidden", status: 403, code: "AuthorizationPermissionMismatch", all: permission},
		{name: "too many requests", status: 429, code: "TooManyRequests", all: throttled},
		{name: "server busy", status: 503, code: "ServerBusy", all: throttled},
		{name: "internal error", status: 500, code: "InternalError", all: nil},
	}
	sentinels := []error{objstore.ErrNotFound, objstore.ErrNoBucket, objstore.ErrPrecondition,
		objstore.ErrPermission, objstore.ErrThrottled, objstore.ErrUnsupported}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqID := "req-" + strconv.Itoa(tt.status)
			s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("x-ms-request-id", reqID)
				w.Header().Set("x-ms-error-code", tt.code)
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tt.status)
				if r.Method != http.MethodHead {
					fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>canned</Message></Error>`, tt.code)
				}
			})
			for _, op := range ops {
				want, ok := tt.except[op.name]
				if !ok {
					want = tt.all
				}
				err := op.call(t.Context(), s)
				var oe *objstore.Error
				if !errors.As(err, &oe) {
					t.Fatalf("%s: error %v (%T) is no *objstore.Error", op.name, err, err)
				}
				if oe.Provider != "az" || oe.Op != op.name || oe.Bucket != "cont" || (oe.Key == "") != (op.name == "List") {
					t.Errorf("%s: error fields {%q %q %q %q}", op.name, oe.Provider, oe.Op, oe.Bucket, oe.Key)
				}
				if oe.Status != tt.status || oe.RequestID != reqID || oe.Code != tt.code {
					t.Errorf("%s: Status %d RequestID %q Code %q, want %d %s %s", op.name, oe.Status, oe.RequestID, oe.Code, tt.status, reqID, tt.code)
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

// TestDeleteMissingIsNil: BlobNotFound without IfVersion is success.
func TestDeleteMissingIsNil(t *testing.T) {
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-error-code", "BlobNotFound")
		w.WriteHeader(404)
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
	s, err := New(t.Context(), Config{
		Account:    testenv.AzuriteAccount,
		AccountKey: testenv.AzuriteKey,
		Endpoint:   "http://127.0.0.1:" + strconv.Itoa(port) + "/" + testenv.AzuriteAccount,
		Container:  "cont",
	})
	if err != nil {
		t.Fatal(err)
	}
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
		w.Header().Set("ETag", `"0x8D"`)
		w.WriteHeader(http.StatusPartialContent)
		w.Write(bytes.Repeat([]byte("x"), 50))
		w.(http.Flusher).Flush() // chunked: no Content-Length to catch it
	})
	r, err := s.NewReader(t.Context(), "k", 0, 100, objstore.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Version != "0x8D" || info.Size != 100 {
		t.Errorf("Info() = %+v", info)
	}
	b, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("ReadAll = %d bytes, %v; want io.ErrUnexpectedEOF", len(b), err)
	}
}

// TestPutSendsMD5: Put is one Put Blob request with Content-MD5, so Azure
// verifies the body.
func TestPutSendsMD5(t *testing.T) {
	var got []string
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got = append(got, r.Method+" "+r.Header.Get("x-ms-blob-type")+" "+r.Header.Get("Content-MD5"))
		w.Header().Set("ETag", `"0x1"`)
		w.WriteHeader(http.StatusCreated)
	})
	if _, err := s.Put(t.Context(), "k", strings.NewReader("hello world"), 11, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	const md5HelloWorld = "XrY7u+Ae7tCTyyK7j1rNww=="
	if len(got) != 1 || got[0] != "PUT BlockBlob "+md5HelloWorld {
		t.Errorf("requests = %q, want one PUT BlockBlob with Content-MD5 %s", got, md5HelloWorld)
	}
}

// TestCopyPartRequest checks the Put Block From URL that CopyPart sends on
// real Azure (Azurite lacks it): a SAS-signed source URL, the source range
// and the part's block ID.
func TestCopyPartRequest(t *testing.T) {
	var put *http.Request
	s := cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("comp") == "block" && r.Header.Get("x-ms-copy-source") != "" {
			put = r.Clone(context.Background())
		}
		w.WriteHeader(http.StatusCreated)
	})
	u, err := s.CreateUpload(t.Context(), "dst", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.CopyPart(t.Context(), 7, "dir/src", 50, 100); err != nil {
		t.Fatal(err)
	}
	if put == nil {
		t.Fatal("no Put Block From URL request")
	}
	src := put.Header.Get("x-ms-copy-source")
	if !strings.Contains(src, "/cont/dir%2Fsrc?") || !strings.Contains(src, "sig=") || !strings.Contains(src, "sp=r") {
		t.Errorf("x-ms-copy-source = %q, want the source blob with a read SAS", src)
	}
	if rng := put.Header.Get("x-ms-source-range"); rng != "bytes=50-149" {
		t.Errorf("x-ms-source-range = %q, want bytes=50-149", rng)
	}
	id, _ := base64.StdEncoding.DecodeString(put.URL.Query().Get("blockid"))
	if want := u.ID() + "-00007"; string(id) != want {
		t.Errorf("block id = %q, want %q", id, want)
	}
}

// TestSecretsNotShown: neither a transport error of a SAS store nor a
// printed Config shows a credential.
func TestSecretsNotShown(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const sig = "c2VjcmV0LXNpZ25hdHVyZQ"
	cfg := Config{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port) + "/acct", Container: "cont", SASToken: "sv=2021-12-02&sig=" + sig}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if err := op.call(t.Context(), s); err == nil || strings.Contains(err.Error(), sig) {
			t.Errorf("%s: error %v shows the SAS signature", op.name, err)
		}
	}
	cfg.AccountKey, cfg.ConnectionString = testenv.AzuriteKey, "AccountKey="+testenv.AzuriteKey
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%v", &cfg)} {
		if strings.Contains(out, sig) || strings.Contains(out, testenv.AzuriteKey) {
			t.Errorf("printed Config shows a secret: %s", out)
		}
	}
}
