package azure

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/objstoretest"
)

// cannedStore returns a shared-key Store whose every request gets the
// answer of h.
func cannedStore(t *testing.T, h http.HandlerFunc) *Store {
	t.Helper()
	return objstoretest.CannedStore(t, h, func(url string, c *http.Client) (*Store, error) {
		return New(t.Context(), Config{
			Account:    testenv.AzuriteAccount,
			AccountKey: testenv.AzuriteKey,
			Endpoint:   url + "/" + testenv.AzuriteAccount,
			Container:  "cont",
			HTTPClient: c,
		})
	})
}

// ops are the Store operations the error tests run, each on key "k".
var ops = objstoretest.ErrorOps(`"0x1"`)

func TestErrorMapping(t *testing.T) {
	m := objstoretest.ErrorMapping{Provider: "az", Bucket: "cont", Ops: ops, Canned: cannedError}
	objstoretest.CheckErrorMapping(t, m, []objstoretest.ErrorCase{
		{Name: "blob not found", Status: 404, Code: "BlobNotFound", Want: objstore.ErrNotFound, Except: map[string]error{"Delete": objstore.ErrPrecondition}},
		{Name: "container not found", Status: 404, Code: "ContainerNotFound", Want: objstore.ErrNoBucket},
		{Name: "condition not met", Status: 412, Code: "ConditionNotMet", Want: objstore.ErrPrecondition},
		{Name: "source condition not met", Status: 412, Code: "SourceConditionNotMet", Want: objstore.ErrPrecondition},
		{Name: "if-none-match on existing blob", Status: 409, Code: "BlobAlreadyExists", Want: objstore.ErrPrecondition},
		{Name: "other conflict", Status: 409, Code: "LeaseIdMissing", Want: nil},
		{Name: "unauthenticated", Status: 401, Code: "NoAuthenticationInformation", Want: objstore.ErrPermission},
		{Name: "forbidden", Status: 403, Code: "AuthorizationPermissionMismatch", Want: objstore.ErrPermission},
		{Name: "too many requests", Status: 429, Code: "TooManyRequests", Want: objstore.ErrThrottled},
		{Name: "server busy", Status: 503, Code: "ServerBusy", Want: objstore.ErrThrottled},
		{Name: "internal error", Status: 500, Code: "InternalError", Want: nil},
	})
}

// cannedError returns a store whose every request gets the canned error
// answer of c, with request id reqID.
func cannedError(t *testing.T, c objstoretest.ErrorCase, reqID string) objstore.Store {
	return cannedStore(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("x-ms-request-id", reqID)
		w.Header().Set("x-ms-error-code", c.Code)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(c.Status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>canned</Message></Error>`, c.Code)
		}
	})
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
	s := objstoretest.Open(t, func() (*Store, error) {
		return New(t.Context(), Config{
			Account:    testenv.AzuriteAccount,
			AccountKey: testenv.AzuriteKey,
			Endpoint:   "http://" + objstoretest.ClosedAddr(t) + "/" + testenv.AzuriteAccount,
			Container:  "cont",
		})
	})
	objstoretest.CheckNetworkErrors(t, s, ops)
}

// TestShortBody: a body that ends cleanly before the promised range is
// io.ErrUnexpectedEOF, not a short io.EOF.
func TestShortBody(t *testing.T) {
	objstoretest.CheckShortBody(t, func(t *testing.T, h http.HandlerFunc) objstore.Store { return cannedStore(t, h) },
		http.Header{"Etag": {`"0x8D"`}}, "0x8D")
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
		if err := op.Call(t.Context(), s); err == nil || strings.Contains(err.Error(), sig) {
			t.Errorf("%s: error %v shows the SAS signature", op.Name, err)
		}
	}
	cfg.AccountKey, cfg.ConnectionString = testenv.AzuriteKey, "AccountKey="+testenv.AzuriteKey
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%v", &cfg)} {
		if strings.Contains(out, sig) || strings.Contains(out, testenv.AzuriteKey) {
			t.Errorf("printed Config shows a secret: %s", out)
		}
	}
}
