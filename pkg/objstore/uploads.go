package objstore

import (
	"context"
	"time"
)

// PendingUpload is a multipart upload in progress on a key.
type PendingUpload struct {
	Key, ID   string
	Initiated time.Time // as the server reports it
}

// UploadLister is implemented by Multipart stores that can list the
// uploads in progress on one key (S3's ListMultipartUploads). WithRetry
// uses it to abort the uploads that an ambiguously failed CreateUpload
// attempt left behind (its answer was lost, so its ID never reached the
// caller).
type UploadLister interface {
	ListUploads(ctx context.Context, key string) ([]PendingUpload, error)
}
