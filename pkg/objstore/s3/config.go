package s3

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Server-side encryption modes of Config.SSE.
const (
	SSES3  = "AES256"  // SSE-S3: keys managed by S3
	SSEKMS = "aws:kms" // SSE-KMS: keys in AWS KMS (Config.SSEKMSKeyID, or the account default)
)

// Defaults of Config.
const (
	DefaultRegion         = "us-east-1"
	DefaultRequestTimeout = 60 * time.Second
	// defaultIdleConnsPerHost keeps enough idle connections for many
	// parallel ranged GETs to the one S3 host.
	defaultIdleConnsPerHost = 64
	dialTimeout             = 5 * time.Second
)

// Config configures a Store. The zero value of every field but Bucket is
// valid.
type Config struct {
	// Bucket is the bucket the Store reads and writes. Required.
	Bucket string
	// Endpoint is the base URL of an S3-compatible server, such as
	// "http://minio:9000"; empty means AWS S3. A URL without a scheme gets
	// "https://".
	Endpoint string
	// Region is the signing region; empty means the SDK's default chain
	// (AWS_REGION, the shared config), then DefaultRegion.
	Region string
	// PathStyle selects path-style addressing (endpoint/bucket/key) rather
	// than virtual-hosted (bucket.endpoint/key). nil means path style when
	// Endpoint is set, virtual-hosted on AWS.
	PathStyle *bool
	// SSE is the server-side encryption requested on every write: "" (the
	// bucket's default), SSES3 or SSEKMS.
	SSE string
	// SSEKMSKeyID is the KMS key for SSEKMS; setting it implies SSEKMS.
	SSEKMSKeyID string
	// MultipartChecksums makes multipart uploads use CRC32C checksums: the
	// server verifies each part and the object gets a composite CRC32C.
	// nil means on for AWS (Endpoint empty); on custom endpoints, whose
	// support varies (MinIO, for one, refuses UploadPartCopy into a
	// checksummed upload, so CopyPart would fail), on for uploads that
	// copy no parts (PutOptions.CopyParts false) and off for the others.
	// Without them, parts are protected by the signed SHA-256 payload hash
	// over plain HTTP and by TLS over HTTPS. Single Puts always carry a
	// CRC32C checksum.
	MultipartChecksums *bool
	// RequestTimeout bounds the wait for a response's headers, and for each
	// read of a response body that makes no progress. 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxConns caps the connections to the S3 host (0 = no cap).
	MaxConns int
	// HTTPClient, when set, replaces the driver's own HTTP client (tests).
	// RequestTimeout and MaxConns then do not apply to the transport.
	HTTPClient *http.Client

	// AccessKeyID and SecretAccessKey (and SessionToken), when set, are the
	// credentials; otherwise the SDK's default chain finds them (env,
	// shared profile, web identity, ECS, EC2 instance metadata). They are
	// never logged or printed.
	AccessKeyID     string
	SecretAccessKey string `json:"-"`
	SessionToken    string `json:"-"`
}

// String describes the configuration without secrets.
func (c Config) String() string {
	secret := ""
	if c.SecretAccessKey != "" {
		secret = "<redacted>"
	}
	auto := func(b *bool) string {
		if b == nil {
			return "auto"
		}
		return fmt.Sprint(*b)
	}
	return fmt.Sprintf("s3.Config{Bucket:%q Endpoint:%q Region:%q PathStyle:%s SSE:%q SSEKMSKeyID:%q MultipartChecksums:%s RequestTimeout:%v MaxConns:%d AccessKeyID:%q SecretAccessKey:%q}",
		c.Bucket, c.Endpoint, c.Region, auto(c.PathStyle), c.SSE, c.SSEKMSKeyID, auto(c.MultipartChecksums),
		c.RequestTimeout, c.MaxConns, c.AccessKeyID, secret)
}

// ConfigFromEnv reads the S3 settings that Nextflow, Fusion and the AWS
// tools put in the environment (everything but Bucket):
//
//   - Endpoint: AWS_S3_ENDPOINT (set by Nextflow), else AWS_ENDPOINT_URL_S3,
//     else AWS_ENDPOINT_URL; path-style addressing whenever one is set.
//   - Region: AWS_REGION, else FUSION_AWS_REGION, else AWS_DEFAULT_REGION,
//     else DefaultRegion.
//   - SSE: FUSION_AWS_SERVER_SIDE_ENCRYPTION and FUSION_AWS_SSEKMS_KEY_ID.
//
// Credentials are not read here: New uses the SDK's default chain.
func ConfigFromEnv() Config {
	return configFromEnv(os.Getenv)
}

func configFromEnv(getenv func(string) string) Config {
	first := func(names ...string) string {
		for _, n := range names {
			if v := strings.TrimSpace(getenv(n)); v != "" {
				return v
			}
		}
		return ""
	}
	c := Config{
		Endpoint:    first("AWS_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:      first("AWS_REGION", "FUSION_AWS_REGION", "AWS_DEFAULT_REGION"),
		SSE:         first("FUSION_AWS_SERVER_SIDE_ENCRYPTION"),
		SSEKMSKeyID: first("FUSION_AWS_SSEKMS_KEY_ID"),
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Endpoint != "" {
		pathStyle := true
		c.PathStyle = &pathStyle
	}
	return c
}

// normalized validates c and fills in the defaults New relies on.
func (c Config) normalized() (Config, error) {
	if c.Bucket == "" {
		return c, fmt.Errorf("s3: Config.Bucket is empty")
	}
	if c.Endpoint != "" && !strings.Contains(c.Endpoint, "://") {
		c.Endpoint = "https://" + c.Endpoint
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	if c.PathStyle == nil {
		pathStyle := c.Endpoint != ""
		c.PathStyle = &pathStyle
	}
	if c.SSEKMSKeyID != "" && c.SSE == "" {
		c.SSE = SSEKMS
	}
	switch c.SSE {
	case "", SSES3, SSEKMS:
	default:
		return c, fmt.Errorf("s3: server-side encryption %q: want %q or %q", c.SSE, SSES3, SSEKMS)
	}
	if c.SSEKMSKeyID != "" && c.SSE != SSEKMS {
		return c, fmt.Errorf("s3: a KMS key id needs SSE %q, not %q", SSEKMS, c.SSE)
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxConns < 0 {
		c.MaxConns = 0
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return c, fmt.Errorf("s3: AccessKeyID and SecretAccessKey must be set together")
	}
	return c, nil
}
