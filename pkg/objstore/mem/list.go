package mem

import (
	"context"
	"sort"
	"strings"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// List returns one page of the keys under opts.Prefix in lexical order.
// With a Delimiter, keys containing it after the prefix fold into Prefixes.
// A page holds at most MaxKeys entries (default 1000), counting objects and
// prefixes; NextToken is the last entry returned and is empty on the last
// page.
func (s *Store) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	if err := s.begin(ctx); err != nil {
		return objstore.ListPage{}, err
	}
	defer s.mu.Unlock()

	max := opts.MaxKeys
	if max <= 0 || max > defaultMaxKeys {
		max = defaultMaxKeys
	}
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		if strings.HasPrefix(k, opts.Prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)

	// A folded prefix sorts at or before every key it covers and the keys
	// it covers are contiguous, so walking keys in order yields entries in
	// order; the token is the last entry name returned.
	var page objstore.ListPage
	n := 0
	last := ""
	for _, k := range keys {
		name, isPrefix := k, false
		if opts.Delimiter != "" {
			rest := k[len(opts.Prefix):]
			if i := strings.Index(rest, opts.Delimiter); i >= 0 {
				name, isPrefix = k[:len(opts.Prefix)+i+len(opts.Delimiter)], true
			}
		}
		if name <= opts.Token || (isPrefix && name == last) {
			continue
		}
		if n == max {
			page.NextToken = last
			return page, nil
		}
		if isPrefix {
			page.Prefixes = append(page.Prefixes, name)
		} else {
			info := s.objects[k].publicInfo()
			if s.opts.NoListMetadata {
				info.Metadata, info.ContentType = nil, ""
			}
			page.Objects = append(page.Objects, info)
		}
		last = name
		n++
	}
	return page, nil
}
