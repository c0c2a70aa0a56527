package e2e

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
)

// liveUploads returns the multipart uploads left in the bucket (formatted
// as "key (upload id, initiated)"), and apart the phantoms of MinIO's bucket-wide
// listing.
//
// MinIO answers ListMultipartUploads without a prefix from an in-memory
// cache (erasureServerPools.mpCache) that only a successful Complete or
// Abort clears. A CompleteMultipartUpload that commits the object and
// then fails (its client, the killed ferry, went away: the crash point
// before-complete forwards the Complete after the kill) leaves its upload
// in that cache for good, though the upload no longer exists: an Abort
// answers NoSuchUpload (and so does not clear it either), ListParts
// answers NoSuchUpload, and the listing of the key, read from disk, omits
// it. Every upload the bucket-wide listing names is therefore confirmed
// with ListParts; one that answers NoSuchUpload is a phantom, not a
// leftover. Any other answer counts as a live upload.
func liveUploads(t *testing.T, e *s3env) (live, phantoms []string) {
	t.Helper()
	ctx := context.Background()
	resp, err := e.srv.Do(ctx, "GET", "/"+e.bucket, url.Values{"uploads": {""}}, nil, nil)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Uploads []struct {
			Key       string `xml:"Key"`
			UploadID  string `xml:"UploadId"`
			Initiated string `xml:"Initiated"`
		} `xml:"Upload"`
	}
	if err := xml.Unmarshal(b, &out); err != nil {
		t.Fatalf("list multipart uploads: %v\n%s", err, b)
	}
	for _, u := range out.Uploads {
		s := fmt.Sprintf("%s (upload %.12s…, initiated %s)", u.Key, u.UploadID, u.Initiated)
		if uploadGone(t, e, u.Key, u.UploadID) {
			phantoms = append(phantoms, s)
		} else {
			live = append(live, s)
		}
	}
	sort.Strings(live)
	sort.Strings(phantoms)
	return live, phantoms
}

// uploadGone reports whether ListParts of the upload id of key answers
// NoSuchUpload.
func uploadGone(t *testing.T, e *s3env, key, id string) bool {
	t.Helper()
	resp, err := e.srv.Do(context.Background(), "GET", "/"+e.bucket+"/"+key, url.Values{"uploadId": {id}}, nil, nil)
	if err != nil {
		t.Fatalf("list parts of %s upload %s: %v", key, id, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusNotFound && strings.Contains(string(b), "NoSuchUpload")
}
