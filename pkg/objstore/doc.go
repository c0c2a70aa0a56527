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
// Retries with exponential backoff and jitter live in one decorator,
// [WithRetry]; drivers do not retry on their own beyond what their SDK does
// for a single attempt.
package objstore
