package testenv

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// signedRequest builds an S3 request signed with AWS Signature Version 4.
// It is a minimal signer for test set-up (bucket creation and the like), so
// that testenv does not link the AWS SDK into every test binary. query may
// be nil; header entries are added to the request and signed.
func signedRequest(ctx context.Context, cred s3Cred, method, endpoint, path string, query url.Values, header http.Header, body []byte) (*http.Request, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	canonQuery := canonicalQuery(query)
	target := endpoint + awsURIEncode(path, false)
	if canonQuery != "" {
		target += "?" + canonQuery
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])

	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)

	// Canonical headers: host plus every header we set, lower-cased, sorted.
	names := []string{"host"}
	values := map[string]string{"host": u.Host}
	for k, vs := range req.Header {
		lk := strings.ToLower(k)
		names = append(names, lk)
		values[lk] = strings.TrimSpace(strings.Join(vs, ","))
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, n := range names {
		canonHeaders.WriteString(n + ":" + values[n] + "\n")
	}
	signedHeaders := strings.Join(names, ";")

	canonReq := strings.Join([]string{
		method,
		awsURIEncode(path, false),
		canonQuery,
		canonHeaders.String(),
		signedHeaders,
		payloadHash,
	}, "\n")
	reqHash := sha256.Sum256([]byte(canonReq))
	scope := day + "/" + cred.region + "/s3/aws4_request"
	stringToSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(reqHash[:])

	key := hmacSHA256([]byte("AWS4"+cred.secretKey), day)
	key = hmacSHA256(key, cred.region)
	key = hmacSHA256(key, "s3")
	key = hmacSHA256(key, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(key, stringToSign))
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		cred.accessKey, scope, signedHeaders, sig))
	return req, nil
}

// s3Cred is what signedRequest signs with.
type s3Cred struct {
	accessKey, secretKey, region string
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// canonicalQuery encodes query the way SigV4 wants it: keys sorted, both
// keys and values URI-encoded.
func canonicalQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := append([]string(nil), q[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			parts = append(parts, awsURIEncode(k, true)+"="+awsURIEncode(v, true))
		}
	}
	return strings.Join(parts, "&")
}

// awsURIEncode percent-encodes everything but the unreserved characters
// (and '/' unless encodeSlash).
func awsURIEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9',
			c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
