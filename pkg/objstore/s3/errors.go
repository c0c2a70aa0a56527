package s3

import (
	"errors"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// wrap turns an SDK error into an *objstore.Error carrying the HTTP status,
// request id and S3 error code, and the sentinel they mean. Only an answer
// from S3 itself is classified: transport, DNS, timeout and credential
// errors get no sentinel (in particular never ErrNotFound).
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	e := &objstore.Error{Provider: "s3", Op: op, Bucket: s.bucket, Key: key, Err: err}
	var credErr *credentialsError
	if errors.As(err, &credErr) {
		return e
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.Status = re.HTTPStatusCode()
		e.RequestID = re.ServiceRequestID()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		e.Code = ae.ErrorCode()
		// The API error says it all; the SDK's wrapping would repeat the
		// status and request id in the message.
		e.Err = ae
	}
	if e.Status != 0 || e.Code != "" {
		e.Kind = classify(e.Status, e.Code)
	}
	return e
}

// missingIsPrecondition turns "the object does not exist" into a failed
// precondition, for writes conditional on a version: the contract says such
// a write fails with ErrPrecondition unless the object has the version.
func missingIsPrecondition(err error) error {
	var e *objstore.Error
	if errors.As(err, &e) && e.Kind == objstore.ErrNotFound {
		e.Kind = objstore.ErrPrecondition
	}
	return err
}

// invalid reports a request the driver refuses before sending it (a bad
// argument or a size beyond S3's limits). It wraps ErrUnsupported so that
// it is final, not retried.
func (s *Store) invalid(op, key string, err error) error {
	return &objstore.Error{Provider: "s3", Op: op, Bucket: s.bucket, Key: key, Kind: objstore.ErrUnsupported, Err: err}
}

// classify maps an S3 error code, else the HTTP status, to a sentinel (nil
// when none applies).
func classify(status int, code string) error {
	switch code {
	case "NoSuchBucket", "InvalidBucketName": // no bucket can have that name
		return objstore.ErrNoBucket
	case "NoSuchKey", "NotFound", "NoSuchUpload":
		return objstore.ErrNotFound
	case "PreconditionFailed", "ConditionalRequestConflict":
		return objstore.ErrPrecondition
	case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"AllAccessDisabled", "AccountProblem", "InvalidObjectState":
		return objstore.ErrPermission
	case "SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
		"RequestThrottled", "RequestThrottledException", "RequestLimitExceeded",
		"TooManyRequests", "TooManyRequestsException", "BandwidthLimitExceeded":
		return objstore.ErrThrottled
	case "NotImplemented":
		return objstore.ErrUnsupported
	}
	switch status {
	case http.StatusNotFound:
		return objstore.ErrNotFound
	case http.StatusPreconditionFailed:
		return objstore.ErrPrecondition
	case http.StatusForbidden:
		return objstore.ErrPermission
	case http.StatusTooManyRequests:
		return objstore.ErrThrottled
	case http.StatusNotImplemented:
		return objstore.ErrUnsupported
	}
	return nil
}
