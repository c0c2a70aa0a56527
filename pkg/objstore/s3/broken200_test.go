package s3

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// TestBroken200IsRetryable: a 200 answer whose body is cut short (the
// connection closed after part of it) or is not the document S3 sends is a
// failure of the transport, not of the request: it must be retryable and
// never a sentinel such as ErrNotFound.
func TestBroken200IsRetryable(t *testing.T) {
	const listDoc = `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>key</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>key</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>&quot;v1&quot;</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>`
	for _, tc := range []struct {
		name string
		body string // what is sent
		cl   int    // Content-Length announced
	}{
		{name: "cut", body: listDoc[:len(listDoc)/2], cl: len(listDoc)},
		{name: "garbage", body: "<ListBucketResult><Contents><Key>", cl: len("<ListBucketResult><Contents><Key>")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("x-amz-request-id", testRequestID)
				if r.Method == http.MethodHead {
					w.Header().Set("Content-Length", "10")
					w.Header().Set("ETag", `"v1"`)
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				w.Header().Set("Content-Length", strconv.Itoa(tc.cl))
				w.WriteHeader(http.StatusOK)
				w.Write([]byte(tc.body))
				if hj, ok := w.(http.Hijacker); ok && len(tc.body) < tc.cl {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
					}
				}
			}))
			t.Cleanup(srv.Close)
			s := testStore(t, srv.URL, nil)
			ops := storeOps(s)
			for _, op := range []string{"List", "Copy", "CreateUpload"} {
				err := ops[op](context.Background())
				if err == nil {
					t.Errorf("%s over a broken 200 answer succeeded", op)
					continue
				}
				if errors.Is(err, objstore.ErrNotFound) || !objstore.Retryable(err) {
					t.Errorf("%s = %v: want a retryable error that is not ErrNotFound", op, err)
				}
			}
		})
	}
}
