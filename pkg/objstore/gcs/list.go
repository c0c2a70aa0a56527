package gcs

import (
	"context"
	"errors"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// listAttrs are the attributes a listing fetches (user metadata too:
// see objstore.Caps.ListMetadata).
var listAttrs = []string{"Name", "Size", "Updated", "Generation", "Metadata"}

// List returns one page of at most opts.MaxKeys objects and prefixes
// (default 1000). Objects and prefixes of in-progress multipart uploads
// (names containing PartInfix) are left out, so a page may hold fewer
// entries than asked while NextToken is set. Errors wrap
// objstore.ErrNoBucket when the bucket is missing.
func (s *Store) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	max := opts.MaxKeys
	if max <= 0 {
		max = defaultMaxKeys
	}
	if s.cfg.Emulator && opts.Delimiter != "" {
		return s.listFolded(ctx, opts, max)
	}
	q := &storage.Query{Prefix: opts.Prefix, Delimiter: opts.Delimiter}
	if err := q.SetAttrSelection(listAttrs); err != nil {
		return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
	}
	var items []*storage.ObjectAttrs
	next, err := iterator.NewPager(s.bkt.Objects(ctx, q), max, opts.Token).NextPage(&items)
	if err != nil {
		return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
	}
	page := objstore.ListPage{NextToken: next}
	for _, a := range items {
		switch {
		case isPartName(a.Name) || isPartName(a.Prefix):
		case a.Prefix != "":
			page.Prefixes = append(page.Prefixes, a.Prefix)
		default:
			page.Objects = append(page.Objects, info(a))
		}
	}
	return page, nil
}

// Tokens of listFolded: the last entry returned, marked as object or
// prefix.
const (
	tokenObject = "o:"
	tokenPrefix = "p:"
)

// listFolded is List with the delimiter applied on the client, over a flat
// listing starting after the token. fake-gcs-server's delimiter listing
// drops prefixes and mis-pages, so Emulator stores use this; it reads
// every key under a folded prefix, which only an emulator can afford.
func (s *Store) listFolded(ctx context.Context, opts objstore.ListOptions, max int) (objstore.ListPage, error) {
	var after string
	afterPrefix := false
	switch {
	case strings.HasPrefix(opts.Token, tokenObject):
		after = opts.Token[len(tokenObject):]
	case strings.HasPrefix(opts.Token, tokenPrefix):
		after, afterPrefix = opts.Token[len(tokenPrefix):], true
	case opts.Token != "":
		return objstore.ListPage{}, s.badRequest("List", opts.Prefix, "InvalidPageToken", errors.New("gcs: unknown page token"))
	}
	q := &storage.Query{Prefix: opts.Prefix, StartOffset: after}
	if err := q.SetAttrSelection(listAttrs); err != nil {
		return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
	}
	it := s.bkt.Objects(ctx, q)
	var page objstore.ListPage
	var last string // token of the last entry in page
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return page, nil
		}
		if err != nil {
			return objstore.ListPage{}, s.wrap("List", opts.Prefix, bucketScope, err)
		}
		name := a.Name
		if name < after || (name == after && !afterPrefix) || (afterPrefix && strings.HasPrefix(name, after)) || isPartName(name) {
			continue
		}
		entry, tok := name, tokenObject+name
		rest := name[len(opts.Prefix):]
		if i := strings.Index(rest, opts.Delimiter); i >= 0 {
			entry = opts.Prefix + rest[:i+len(opts.Delimiter)]
			tok = tokenPrefix + entry
			if len(page.Prefixes) > 0 && page.Prefixes[len(page.Prefixes)-1] == entry {
				continue
			}
		}
		if len(page.Objects)+len(page.Prefixes) == max {
			page.NextToken = last
			return page, nil
		}
		if strings.HasPrefix(tok, tokenPrefix) {
			page.Prefixes = append(page.Prefixes, entry)
		} else {
			page.Objects = append(page.Objects, info(a))
		}
		last = tok
	}
}
