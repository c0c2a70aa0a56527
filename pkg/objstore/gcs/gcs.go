package gcs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Limits of GCS and the defaults of this driver.
const (
	// MaxObjectSize is the largest object GCS stores (5 TiB).
	MaxObjectSize = 5 << 40
	// DefaultChunkSize is the default Config.ChunkSize (16 MiB).
	DefaultChunkSize = 16 << 20
	// DefaultMinPartSize is the default Config.MinPartSize (5 MiB). GCS has
	// no minimum part size (parts are whole objects); this only sets how
	// finely writeback splits a file for parallel uploads.
	DefaultMinPartSize = 5 << 20
	// MaxParts is the largest number of parts of one multipart upload.
	MaxParts = 10000
	// defaultMaxKeys is the page size of List when MaxKeys is 0.
	defaultMaxKeys = 1000
	// chunkAlign is the granularity of resumable-upload chunks (256 KiB).
	chunkAlign = 256 << 10
	// chunkAttempts bounds the tries of one chunk of a resumable upload.
	chunkAttempts = 4
)

// Config configures a Store. Only Bucket is required.
type Config struct {
	// Bucket is the bucket the store serves. Required.
	Bucket string
	// Endpoint overrides the GCS endpoint: "host:port" or a URL such as
	// "http://127.0.0.1:4443". Empty means the real GCS endpoint.
	Endpoint string
	// Emulator says Endpoint is fake-gcs-server: requests carry no
	// credentials, and preconditions the emulator ignores (reads, copies,
	// deletes, composes) and delimiter listing (which it gets wrong) are
	// done on the client. Those client-side checks are not atomic; on real
	// GCS the server enforces them.
	Emulator bool
	// CredentialsFile is a service-account JSON key file. Empty means
	// Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS,
	// gcloud's user credentials, workload identity or the metadata server.
	CredentialsFile string
	// ChunkSize is the largest object Put sends in one request; larger
	// objects are sent as a resumable upload in chunks of this size, each
	// buffered in memory. Default DefaultChunkSize; rounded up to 256 KiB.
	ChunkSize int
	// MinPartSize is what Caps reports as MinPartSize. Default
	// DefaultMinPartSize.
	MinPartSize int64
	// HTTPClient, when set, sends every request and is used as is: the
	// driver adds no credentials to it. For tests and custom transports.
	HTTPClient *http.Client
}

// ConfigFromEnv returns a Config (without Bucket) from the environment:
// STORAGE_EMULATOR_HOST selects fake-gcs-server without credentials;
// otherwise the real GCS with Application Default Credentials, which the
// SDK finds itself (GOOGLE_APPLICATION_CREDENTIALS for a service-account
// file, workload identity, the metadata server).
func ConfigFromEnv() Config {
	var c Config
	if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
		c.Endpoint = h
		c.Emulator = true
	}
	return c
}

// Store is one GCS bucket. It implements objstore.Store and
// objstore.Multipart. All methods are safe for concurrent use.
type Store struct {
	cfg    Config // immutable after New
	client *storage.Client
	bkt    *storage.BucketHandle
}

var (
	_ objstore.Store     = (*Store)(nil)
	_ objstore.Multipart = (*Store)(nil)
)

// New returns a Store for cfg.Bucket. It makes no request, so a missing
// bucket shows up on first use (as an error wrapping objstore.ErrNoBucket).
// The SDK's own retries are off: retries belong to objstore.WithRetry.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("gcs: Config.Bucket is required")
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	cfg.ChunkSize = roundUp(cfg.ChunkSize, chunkAlign)
	if cfg.MinPartSize <= 0 {
		cfg.MinPartSize = DefaultMinPartSize
	}
	opts := []option.ClientOption{storage.WithJSONReads()}
	if cfg.Endpoint != "" {
		ep, err := endpointURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, option.WithEndpoint(ep))
	}
	switch {
	case cfg.HTTPClient != nil:
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	case cfg.Emulator:
		opts = append(opts, option.WithoutAuthentication())
	case cfg.CredentialsFile != "":
		opts = append(opts, option.WithAuthCredentialsFile(option.ServiceAccount, cfg.CredentialsFile))
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gcs: new client: %w", err)
	}
	client.SetRetry(storage.WithPolicy(storage.RetryNever))
	return &Store{cfg: cfg, client: client, bkt: client.Bucket(cfg.Bucket)}, nil
}

// endpointURL turns "host:port" or a URL into the JSON API base URL.
func endpointURL(ep string) (string, error) {
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	ep = strings.TrimRight(ep, "/")
	if strings.Count(ep, "/") < 3 { // no path: add the JSON API's
		ep += "/storage/v1"
	}
	if strings.ContainsAny(ep, " \t\n") {
		return "", fmt.Errorf("gcs: invalid endpoint %q", ep)
	}
	return ep + "/", nil
}

// Caps reports GCS's limits. CopyPart is false: GCS has no server-side copy
// of a byte range.
func (s *Store) Caps() objstore.Caps {
	return objstore.Caps{
		Provider:      "gs",
		MaxObjectSize: MaxObjectSize,
		MaxSinglePut:  MaxObjectSize,
		MinPartSize:   s.cfg.MinPartSize,
		MaxPartSize:   MaxObjectSize,
		MaxParts:      MaxParts,
		CopyPart:      false,
		Metadata:      true,
		ListMetadata:  true,
		Tags:          false,
	}
}

// Close releases the client's connections.
func (s *Store) Close() error { return s.client.Close() }

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// parseVersion turns a Version (a generation in decimal) into a
// generation. A string that is no generation can match no object: the
// caller fails with ErrPrecondition without asking the server.
func parseVersion(v string) (int64, bool) {
	g, err := strconv.ParseInt(v, 10, 64)
	return g, err == nil && g > 0
}

// formatVersion is the Version of a generation.
func formatVersion(gen int64) string { return strconv.FormatInt(gen, 10) }

// info converts object attributes to an ObjectInfo.
func info(a *storage.ObjectAttrs) objstore.ObjectInfo {
	return objstore.ObjectInfo{
		Key:         a.Name,
		Size:        a.Size,
		ModTime:     a.Updated,
		Version:     formatVersion(a.Generation),
		Metadata:    lowerKeys(a.Metadata),
		ContentType: a.ContentType,
	}
}

// lowerKeys returns m with lower-case keys (nil when m is empty). GCS keeps
// the case of metadata keys; ferry uses lower case everywhere, like S3.
func lowerKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = v
	}
	return out
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
