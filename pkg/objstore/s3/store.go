package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// S3 limits (https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html).
const (
	maxObjectSize = 5 << 40 // 5 TiB
	maxSinglePut  = 5 << 30 // 5 GiB, also the largest single CopyObject
	minPartSize   = 5 << 20 // 5 MiB
	maxPartSize   = 5 << 30 // 5 GiB
	maxParts      = 10000
	// copyPartBase is the preferred part size of a multipart copy.
	copyPartBase = 512 << 20
	// copyConcurrency bounds the parallel UploadPartCopy calls of one Copy.
	copyConcurrency = 4
)

var caps = objstore.Caps{
	Provider:      "s3",
	MaxObjectSize: maxObjectSize,
	MaxSinglePut:  maxSinglePut,
	MinPartSize:   minPartSize,
	MaxPartSize:   maxPartSize,
	MaxParts:      maxParts,
	CopyPart:      true,
	Metadata:      true,
	Tags:          true,
}

// Store is one S3 bucket. It implements objstore.Store and
// objstore.Multipart and is safe for concurrent use.
type Store struct {
	client      *s3.Client
	bucket      string
	sse         types.ServerSideEncryption
	sseKMSKeyID *string
	// partChecksum is the checksum of multipart uploads that may copy
	// parts ("" for none); streamChecksum that of the others.
	partChecksum   types.ChecksumAlgorithm
	streamChecksum types.ChecksumAlgorithm
	// plainHTTP: the endpoint is http://, where the SDK signs the SHA-256
	// of every body unless told otherwise (see unsignedPayload).
	plainHTTP   bool
	readTimeout time.Duration
	idle        func() // closes idle connections of our own transport (may be nil)

	// copyThreshold is the largest object Copy copies with one CopyObject,
	// and copyPartSize the part size beyond it (0 = computed); tests lower
	// them.
	copyThreshold int64
	copyPartSize  int64
}

var (
	_ objstore.Store     = (*Store)(nil)
	_ objstore.Multipart = (*Store)(nil)
)

// New returns a Store for cfg.Bucket. It loads the SDK's default
// configuration (credentials chain, shared config, AWS_CA_BUNDLE) but makes
// no request: a missing bucket or bad credentials show up on first use.
//
// AWS_CA_BUNDLE, which some machines export, is honoured for HTTPS
// endpoints and harmless for plain-HTTP ones; when it names a file that
// cannot be read, New fails with an error that says so (the SDK would
// otherwise fail with a bare file error).
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	if ca := os.Getenv("AWS_CA_BUNDLE"); ca != "" {
		if _, err := os.Stat(ca); err != nil {
			return nil, fmt.Errorf("s3: AWS_CA_BUNDLE=%q cannot be read (unset it or point it at a PEM file): %w", ca, err)
		}
	}

	// A BuildableClient, not a plain http.Client: the SDK adds the
	// AWS_CA_BUNDLE roots to it (it rejects any other client type then).
	hc := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) {
			d.Timeout = dialTimeout
			d.KeepAlive = 30 * time.Second
		}).
		WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = 4 * max(defaultIdleConnsPerHost, cfg.MaxConns)
			tr.MaxIdleConnsPerHost = max(defaultIdleConnsPerHost, cfg.MaxConns)
			tr.MaxConnsPerHost = cfg.MaxConns
			tr.ResponseHeaderTimeout = cfg.RequestTimeout
			tr.IdleConnTimeout = 90 * time.Second
			tr.ExpectContinueTimeout = time.Second
		}).
		// No SDK inactivity timeout on the socket: it would fire while a
		// large part is being uploaded. Reads time out in our reader.
		WithReadTimeout(0)

	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryMaxAttempts(1),
		config.WithLogger(logging.Nop{}),
		config.WithClientLogMode(0),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultRegion
	}
	// Freeze the client now: the S3 client would otherwise rebuild it with
	// its own timeouts, and a frozen *http.Client lets Close drop idle
	// connections.
	if b, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		awsCfg.HTTPClient = b.Freeze()
	}
	if awsCfg.Credentials != nil {
		awsCfg.Credentials = markedCredentials{awsCfg.Credentials}
	}

	s := &Store{
		bucket:        cfg.Bucket,
		sse:           types.ServerSideEncryption(cfg.SSE),
		readTimeout:   cfg.RequestTimeout,
		copyThreshold: maxSinglePut,
	}
	switch mc := cfg.MultipartChecksums; {
	case mc == nil:
		s.streamChecksum = types.ChecksumAlgorithmCrc32c
		if cfg.Endpoint == "" {
			s.partChecksum = types.ChecksumAlgorithmCrc32c
		}
	case *mc:
		s.partChecksum, s.streamChecksum = types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc32c
	}
	s.plainHTTP = strings.HasPrefix(strings.ToLower(cfg.Endpoint), "http://")
	if cfg.SSEKMSKeyID != "" {
		s.sseKMSKeyID = aws.String(cfg.SSEKMSKeyID)
	}
	s.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = *cfg.PathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.RetryMaxAttempts = 1
		o.Logger = logging.Nop{}
		o.ClientLogMode = 0
		o.DisableLogOutputChecksumValidationSkipped = true
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		if cfg.HTTPClient != nil {
			o.HTTPClient = cfg.HTTPClient
		}
		o.HTTPClient = fileBodyClient{o.HTTPClient}
	})
	if cfg.HTTPClient != nil {
		s.idle = cfg.HTTPClient.CloseIdleConnections
	} else if c, ok := awsCfg.HTTPClient.(interface{ CloseIdleConnections() }); ok {
		s.idle = c.CloseIdleConnections
	}
	return s, nil
}

// markedCredentials wraps the credentials provider so that errors of the
// credential chain (which may carry the HTTP status of an instance-metadata
// or STS call) are never mistaken for an S3 answer about the object.
type markedCredentials struct {
	aws.CredentialsProvider
}

// credentialsError is a failure to obtain credentials.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "get AWS credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

func (m markedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := m.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, &credentialsError{err: err}
	}
	return c, nil
}

// Caps reports S3's limits: 5 TiB objects, 5 GiB single puts and parts,
// parts of at least 5 MiB, 10000 parts; CopyPart, Metadata and Tags.
func (s *Store) Caps() objstore.Caps { return caps }

// Close closes idle connections. The Store must not be used afterwards.
func (s *Store) Close() error {
	if s.idle != nil {
		s.idle()
	}
	return nil
}

// Stat returns key's metadata (HeadObject). Errors wrap ErrNotFound,
// ErrNoBucket (for an unknown bucket only when the server says so; a HEAD
// cannot tell), ErrPermission or ErrThrottled.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	return s.head(ctx, "Stat", key, "")
}

// head is HeadObject with an optional If-Match precondition.
func (s *Store) head(ctx context.Context, op, key, ifVersion string) (objstore.ObjectInfo, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket:  &s.bucket,
		Key:     &key,
		IfMatch: quoteETag(ifVersion),
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap(op, key, err)
	}
	return objstore.ObjectInfo{
		Key:      key,
		Size:     aws.ToInt64(out.ContentLength),
		ModTime:  aws.ToTime(out.LastModified),
		Version:  unquoteETag(out.ETag),
		Metadata: lowerKeys(out.Metadata),
		// A listing has none: what looks at it stats the object.
		ContentType: aws.ToString(out.ContentType),
	}, nil
}

// List returns one page of keys (ListObjectsV2). Keys travel URL-encoded so
// that any byte survives the XML. Errors wrap ErrNoBucket, ErrPermission or
// ErrThrottled.
func (s *Store) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	in := &s3.ListObjectsV2Input{
		Bucket:       &s.bucket,
		EncodingType: types.EncodingTypeUrl,
	}
	if opts.Prefix != "" {
		in.Prefix = aws.String(opts.Prefix)
	}
	if opts.Delimiter != "" {
		in.Delimiter = aws.String(opts.Delimiter)
	}
	if opts.Token != "" {
		in.ContinuationToken = aws.String(opts.Token)
	}
	if opts.MaxKeys > 0 {
		in.MaxKeys = aws.Int32(int32(min(opts.MaxKeys, 1000)))
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return objstore.ListPage{}, s.wrap("List", opts.Prefix, err)
	}
	dec := func(v *string) (string, error) { return aws.ToString(v), nil }
	if out.EncodingType == types.EncodingTypeUrl {
		dec = decodeListKey
	}
	var page objstore.ListPage
	for _, o := range out.Contents {
		key, err := dec(o.Key)
		if err != nil {
			return objstore.ListPage{}, s.wrap("List", opts.Prefix, err)
		}
		page.Objects = append(page.Objects, objstore.ObjectInfo{
			Key:     key,
			Size:    aws.ToInt64(o.Size),
			ModTime: aws.ToTime(o.LastModified),
			Version: unquoteETag(o.ETag),
		})
	}
	for _, p := range out.CommonPrefixes {
		prefix, err := dec(p.Prefix)
		if err != nil {
			return objstore.ListPage{}, s.wrap("List", opts.Prefix, err)
		}
		page.Prefixes = append(page.Prefixes, prefix)
	}
	if aws.ToBool(out.IsTruncated) {
		page.NextToken = aws.ToString(out.NextContinuationToken)
	}
	return page, nil
}

// Put uploads size bytes of src as key with one PutObject, with a CRC32C
// checksum that the server verifies. Sizes beyond Caps.MaxSinglePut fail
// with ErrUnsupported (use multipart). IfAbsent sends If-None-Match: *,
// IfVersion If-Match; a failed precondition wraps ErrPrecondition.
func (s *Store) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if size < 0 || size > maxSinglePut {
		return objstore.ObjectInfo{}, s.invalid("Put", key, fmt.Errorf("size %d is outside 0..%d (use a multipart upload)", size, int64(maxSinglePut)))
	}
	ctx, body, sum, err := s.checksummedBody(ctx, src, size)
	if err != nil {
		return objstore.ObjectInfo{}, s.wrap("Put", key, err)
	}
	in := &s3.PutObjectInput{
		Bucket:               &s.bucket,
		Key:                  &key,
		Body:                 body,
		ContentLength:        aws.Int64(size),
		ChecksumAlgorithm:    types.ChecksumAlgorithmCrc32c,
		ChecksumCRC32C:       sum,
		Metadata:             lowerKeys(opts.Metadata),
		Tagging:              encodeTags(opts.Tags),
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.sseKMSKeyID,
		IfMatch:              quoteETag(opts.IfVersion),
	}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	if opts.IfAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.PutObject(ctx, in, s.unsignedPayload)
	if err != nil {
		err = s.wrap("Put", key, err)
		if opts.IfVersion != "" {
			err = missingIsPrecondition(err)
		}
		return objstore.ObjectInfo{}, err
	}
	return objstore.ObjectInfo{
		Key:      key,
		Size:     size,
		ModTime:  responseTime(out.ResultMetadata),
		Version:  unquoteETag(out.ETag),
		Metadata: lowerKeys(opts.Metadata),
	}, nil
}

// Delete removes key (DeleteObject); a missing key is not an error. With
// IfVersion, the object must exist with that version, else the error wraps
// ErrPrecondition: a HEAD checks it first (some servers, MinIO among them,
// ignore If-Match on DELETE), then the delete carries If-Match so that
// servers with conditional deletes close the race.
func (s *Store) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}
	if opts.IfVersion != "" {
		if _, err := s.head(ctx, "Delete", key, opts.IfVersion); err != nil {
			return missingIsPrecondition(err)
		}
		in.IfMatch = quoteETag(opts.IfVersion)
	}
	_, err := s.client.DeleteObject(ctx, in)
	if err == nil {
		return nil
	}
	err = s.wrap("Delete", key, err)
	switch {
	case opts.IfVersion != "":
		return missingIsPrecondition(err)
	case errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrNoBucket):
		return nil
	}
	return err
}
