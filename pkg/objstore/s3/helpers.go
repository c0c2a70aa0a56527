package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// unquoteETag turns an S3 ETag into an objstore version (quotes stripped).
func unquoteETag(etag *string) string {
	return strings.Trim(aws.ToString(etag), `"`)
}

// quoteETag turns a version back into an ETag for If-Match headers; nil for
// an empty version (no precondition).
func quoteETag(version string) *string {
	if version == "" {
		return nil
	}
	return aws.String(`"` + strings.Trim(version, `"`) + `"`)
}

// lowerKeys copies user metadata with lower-case keys (S3 stores them
// case-insensitively as x-amz-meta-* headers). nil stays nil.
func lowerKeys(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = v
	}
	return out
}

// encodeTags renders tags as the x-amz-tagging header (URL query syntax),
// in a stable order; nil when there are none.
func encodeTags(tags map[string]string) *string {
	if len(tags) == 0 {
		return nil
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, uriEncode(k, true)+"="+uriEncode(tags[k], true))
	}
	return aws.String(strings.Join(parts, "&"))
}

// decodeListKey decodes a key or prefix of a listing made with
// EncodingType=url.
func decodeListKey(v *string) (string, error) {
	s, err := url.QueryUnescape(aws.ToString(v))
	if err != nil {
		return "", fmt.Errorf("decode listed key %q: %w", aws.ToString(v), err)
	}
	return s, nil
}

// copySource renders bucket/key for x-amz-copy-source.
func copySource(bucket, key string) *string {
	return aws.String(bucket + "/" + uriEncode(key, false))
}

// uriEncode percent-encodes every byte but the unreserved ones (and '/'
// unless encodeSlash), the encoding S3 expects in headers that carry URLs
// or query strings.
func uriEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// httpRange renders the Range header for off and length (< 0: to the end).
func httpRange(off, length int64) string {
	if length < 0 {
		return fmt.Sprintf("bytes=%d-", off)
	}
	return fmt.Sprintf("bytes=%d-%d", off, off+length-1)
}

// responseTime is the server's Date header of a response (the closest
// thing to the new object's modification time that a write returns), or
// the local time when it is missing.
func responseTime(md middleware.Metadata) time.Time {
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			return t
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

// unsignedPayload is an option of a request whose body carries a checksum
// header (x-amz-checksum-crc32c, signed, verified by the server): over
// plain HTTP the SDK would also hash the whole body with SHA-256 for the
// signature (40 % of ferry's CPU while writing a large file to MinIO, and
// as much again on the server, which verifies it). The body is sent as
// UNSIGNED-PAYLOAD instead; its integrity rests on the checksum, as it
// does over HTTPS, where the SDK sends unsigned payloads anyway.
func (s *Store) unsignedPayload(o *s3.Options) {
	if !s.plainHTTP {
		return
	}
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("ferryUnsignedPayload",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
			}), middleware.After)
	})
}
