package azure

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// listInclude makes listings carry each blob's metadata (see
// objstore.Caps.ListMetadata).
var listInclude = container.ListBlobsInclude{Metadata: true}

// List returns one page of at most opts.MaxKeys blobs and prefixes
// (default and ceiling 5000). Blobs that only have uncommitted blocks (a
// multipart upload in progress) are not listed. Errors wrap
// objstore.ErrNoBucket when the container is missing.
func (s *Store) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	max := opts.MaxKeys
	if max <= 0 || max > defaultMaxKeys {
		max = defaultMaxKeys
	}
	maxResults := int32(max)
	var prefix, marker *string
	if opts.Prefix != "" {
		prefix = &opts.Prefix
	}
	if opts.Token != "" {
		marker = &opts.Token
	}
	var seg struct {
		items    []*container.BlobItem
		prefixes []*container.BlobPrefix
		next     *string
	}
	if opts.Delimiter != "" {
		resp, err := s.cont.NewListBlobsHierarchyPager(opts.Delimiter, &container.ListBlobsHierarchyOptions{
			Prefix: prefix, Marker: marker, MaxResults: &maxResults, Include: listInclude,
		}).NextPage(ctx)
		if err != nil {
			return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
		}
		if resp.Segment != nil {
			seg.items, seg.prefixes = resp.Segment.BlobItems, resp.Segment.BlobPrefixes
		}
		seg.next = resp.NextMarker
	} else {
		resp, err := s.cont.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
			Prefix: prefix, Marker: marker, MaxResults: &maxResults, Include: listInclude,
		}).NextPage(ctx)
		if err != nil {
			return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
		}
		if resp.Segment != nil {
			seg.items = resp.Segment.BlobItems
		}
		seg.next = resp.NextMarker
	}
	page := objstore.ListPage{NextToken: deref(seg.next)}
	for _, b := range seg.items {
		if b == nil || b.Name == nil {
			continue
		}
		info := objstore.ObjectInfo{Key: *b.Name, Metadata: decodeMetadata(b.Metadata)}
		if p := b.Properties; p != nil {
			info.Size = deref(p.ContentLength)
			info.ModTime = deref(p.LastModified)
			info.Version = etagVersion(p.ETag)
			info.ContentType = deref(p.ContentType)
		}
		page.Objects = append(page.Objects, info)
	}
	for _, p := range seg.prefixes {
		if p != nil && p.Name != nil {
			page.Prefixes = append(page.Prefixes, *p.Name)
		}
	}
	return page, nil
}
