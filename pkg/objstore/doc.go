// Package objstore is ferry's pluggable object-store contract.
//
// A backend implements [Store] (and optionally [Multipart]) and passes the
// conformance suite in package objstoretest. Drivers live in sub-packages
// (s3, gcs, azure, mem); each is the only importer of its cloud SDK.
//
// Errors returned by a Store wrap one of the sentinels ([ErrNotFound],
// [ErrPrecondition], [ErrPermission], [ErrThrottled], [ErrUnsupported]) when
// the backend said so, and are otherwise transport or server errors. A
// transport, DNS or unknown error is never [ErrNotFound]. Drivers wrap what
// the cloud said in [*Error], which carries the provider, operation, bucket,
// key, HTTP status and request id for logging (never a credential).
//
// An upload source (the src of Put and UploadPart) may be a range of a
// local file ([FileRange], [SourceFile]): a driver may then send its bytes
// from the file (sendfile(2)) after one read through its ReadAt, provided
// the request carries a checksum of what that read returned, which the
// server verifies; the s3 driver does so over plain HTTP.
//
// A driver streaming a long response body of known length over HTTP/1.1
// may raise its socket's receive low-water mark while the body runs
// ([WithLowWater]): the reader then wakes once per batch of bytes, not
// once per piece the server writes.
//
// Retries with exponential backoff and jitter live in one decorator,
// [WithRetry]; drivers do not retry on their own beyond what their SDK does
// for a single attempt.
package objstore
