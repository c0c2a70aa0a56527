package gcs

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// scope says what a 404 of an operation can mean.
type scope int

const (
	// objectScope: a 404 means the object (or the bucket) is missing.
	objectScope scope = iota
	// bucketScope: the operation needs no object (List, Put, UploadPart),
	// so a 404 means the bucket is missing.
	bucketScope
)

// requestIDHeader carries GCS's request id (the upload id of the Google
// front end), which Google support asks for.
const requestIDHeader = "X-Guploader-Uploadid"

// wrap turns an SDK error into an *objstore.Error carrying the sentinel
// that matches GCS's answer: 404 → ErrNotFound (ErrNoBucket when the bucket
// is missing), 412 → ErrPrecondition, 401/403 → ErrPermission, 429/503 →
// ErrThrottled. Transport errors keep no sentinel, so they are never
// ErrNotFound. An error that is already an *objstore.Error is returned as
// is.
func (s *Store) wrap(op, key string, sc scope, err error) error {
	if err == nil || objstore.IsError(err) {
		return err
	}
	e := &objstore.Error{Provider: "gs", Op: op, Bucket: s.cfg.Bucket, Key: key, Err: err}
	classify(e, err, sc)
	return e
}

// classify fills e's Status, RequestID, Code and Kind from err.
func classify(e *objstore.Error, err error, sc scope) {
	var ge *googleapi.Error
	hasAPI := errors.As(err, &ge)
	if hasAPI {
		e.Status = ge.Code
		if ge.Header != nil {
			e.RequestID = ge.Header.Get(requestIDHeader)
		}
		if len(ge.Errors) > 0 {
			e.Code = ge.Errors[0].Reason
		}
		if e.Code == "" {
			e.Code = bodyCode(ge.Body)
		}
	}
	switch {
	case errors.Is(err, storage.ErrBucketNotExist):
		e.Kind = objstore.ErrNoBucket
	case errors.Is(err, storage.ErrObjectNotExist) || e.Status == http.StatusNotFound:
		if sc == bucketScope || (hasAPI && bucketMissing(ge)) {
			e.Kind = objstore.ErrNoBucket
		} else {
			e.Kind = objstore.ErrNotFound
		}
	case e.Status == http.StatusPreconditionFailed:
		e.Kind = objstore.ErrPrecondition
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		e.Kind = objstore.ErrPermission
	case e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable:
		e.Kind = objstore.ErrThrottled
	}
	if e.Status == 0 && errors.Is(e.Kind, objstore.ErrNotFound) {
		e.Status = http.StatusNotFound // the SDK's bare ErrObjectNotExist
	}
}

// bucketMissing reports whether a 404 names the bucket rather than the
// object ("The specified bucket does not exist." on the JSON API,
// NoSuchBucket on the XML API).
func bucketMissing(ge *googleapi.Error) bool {
	msg := strings.ToLower(ge.Message + " " + ge.Body)
	for _, it := range ge.Errors {
		msg += " " + strings.ToLower(it.Message)
	}
	return strings.Contains(msg, "bucket does not exist") || strings.Contains(msg, "nosuchbucket")
}

// bodyCode extracts the error reason from a body the SDK did not parse (a
// media download's): JSON {"error":{"errors":[{"reason":…}]}} or XML
// <Code>…</Code>.
func bodyCode(body string) string {
	var doc struct {
		Error struct {
			Errors []struct {
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &doc) == nil && len(doc.Error.Errors) > 0 {
		return doc.Error.Errors[0].Reason
	}
	i := strings.Index(body, "<Code>")
	if i < 0 {
		return ""
	}
	rest := body[i+len("<Code>"):]
	j := strings.Index(rest, "</Code>")
	if j < 0 || j > 64 {
		return ""
	}
	return rest[:j]
}

// preconditionErr is a precondition that failed on the client: a Version
// that is no generation, or a check the emulator does not make.
func (s *Store) preconditionErr(op, key string, cause error) error {
	return &objstore.Error{Provider: "gs", Op: op, Bucket: s.cfg.Bucket, Key: key,
		Status: http.StatusPreconditionFailed, Code: "conditionNotMet", Kind: objstore.ErrPrecondition, Err: cause}
}

// missingAsPrecondition turns err, which wraps objstore.ErrNotFound, into
// the ErrPrecondition of a conditional operation on a missing object,
// keeping the status, request id and code of the answer.
func missingAsPrecondition(err error) error {
	return objstore.MissingAsPrecondition(err, errMissing)
}

// errMissing is the cause of the ErrPrecondition of a conditional
// operation on a missing object.
var errMissing = errors.New("gcs: the object does not exist")

// badRequest is a final client-side error (no sentinel, not retryable).
func (s *Store) badRequest(op, key, code string, cause error) error {
	return &objstore.Error{Provider: "gs", Op: op, Bucket: s.cfg.Bucket, Key: key,
		Status: http.StatusBadRequest, Code: code, Err: cause}
}
