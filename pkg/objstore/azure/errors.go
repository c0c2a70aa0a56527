package azure

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// scope says what a 404 of an operation can mean.
type scope int

const (
	// objectScope: a 404 means the blob (or the container) is missing.
	objectScope scope = iota
	// bucketScope: the operation needs no blob (List, Put, UploadPart),
	// so a 404 means the container is missing.
	bucketScope
)

// Azure error codes the mapping looks at.
const (
	codeContainerNotFound     = "ContainerNotFound"
	codeBlobAlreadyExists     = "BlobAlreadyExists"
	codeConditionNotMet       = "ConditionNotMet"
	codeCannotVerifyCopySrc   = "CannotVerifyCopySource"
	codeInvalidRange          = "InvalidRange"
	requestIDHeader           = "x-ms-request-id"
	codeBlobNotFound          = "BlobNotFound"
	codeInvalidBlockList      = "InvalidBlockList"
	codeSourceConditionNotMet = "SourceConditionNotMet"
)

// wrap turns an SDK error into an *objstore.Error with the sentinel that
// matches Azure's answer: ContainerNotFound → ErrNoBucket; 404 →
// ErrNotFound; 412, and 409 BlobAlreadyExists (If-None-Match: *) →
// ErrPrecondition; 401/403 → ErrPermission; 429/503 → ErrThrottled.
// Transport errors keep no sentinel, so they are never ErrNotFound. An
// error that is already an *objstore.Error is returned as is.
func (s *Store) wrap(op, key string, sc scope, err error) error {
	if err == nil || objstore.IsError(err) {
		return err
	}
	redactSAS(err)
	e := &objstore.Error{Provider: "az", Op: op, Bucket: s.cfg.Container, Key: key, Err: err}
	classify(e, err, sc)
	return e
}

// redactSAS blanks the signature of a SAS in the URL of a transport error
// (net/http puts the whole URL in its message), so that logging the error
// never shows a credential. Azure's own errors show no query.
func redactSAS(err error) {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		ue.URL = "(unparsable URL)"
		return
	}
	if q := u.Query(); q.Has("sig") {
		q.Set("sig", "REDACTED")
		u.RawQuery = q.Encode()
		ue.URL = u.String()
	}
}

// classify fills e's Status, RequestID, Code and Kind from err.
func classify(e *objstore.Error, err error, sc scope) {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return
	}
	e.Status, e.Code = re.StatusCode, re.ErrorCode
	if re.RawResponse != nil {
		e.RequestID = re.RawResponse.Header.Get(requestIDHeader)
		if e.Code == "" { // HEAD answers carry the code in a header only
			e.Code = re.RawResponse.Header.Get("x-ms-error-code")
		}
	}
	switch {
	case e.Code == codeContainerNotFound:
		e.Kind = objstore.ErrNoBucket
	case e.Status == http.StatusNotFound:
		if sc == bucketScope && e.Code != codeBlobNotFound {
			e.Kind = objstore.ErrNoBucket
		} else {
			e.Kind = objstore.ErrNotFound
		}
	case e.Status == http.StatusPreconditionFailed,
		e.Status == http.StatusConflict && e.Code == codeBlobAlreadyExists:
		e.Kind = objstore.ErrPrecondition
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		e.Kind = objstore.ErrPermission
	case e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable:
		e.Kind = objstore.ErrThrottled
	}
}

// isStatus reports whether err is an Azure answer with this status.
func isStatus(err error, status int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == status
}

// badRequest is a final client-side error (no sentinel, not retryable).
func (s *Store) badRequest(op, key, code string, cause error) error {
	return &objstore.Error{Provider: "az", Op: op, Bucket: s.cfg.Container, Key: key,
		Status: http.StatusBadRequest, Code: code, Err: cause}
}
