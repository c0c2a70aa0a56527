package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

var _ objstore.UploadLister = (*Store)(nil)

// ListUploads lists the multipart uploads in progress on key exactly
// (ListMultipartUploads by prefix, every page).
func (s *Store) ListUploads(ctx context.Context, key string) ([]objstore.PendingUpload, error) {
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &key}
	var out []objstore.PendingUpload
	for {
		page, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, s.wrap("ListUploads", key, err)
		}
		for _, u := range page.Uploads {
			if aws.ToString(u.Key) != key {
				continue
			}
			out = append(out, objstore.PendingUpload{Key: key, ID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(page.IsTruncated) || (page.NextKeyMarker == nil && page.NextUploadIdMarker == nil) {
			return out, nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}
