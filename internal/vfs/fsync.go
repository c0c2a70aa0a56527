package vfs

import (
	"context"
	"strings"
)

// Fsync makes the name p durable in the bucket without an open handle: a
// file's staged bytes, or, for a directory (fsync of a directory
// descriptor, as after an atomic rename), every file staged directly in
// it, so that the names it holds now are the bucket's. Directories above
// buckets hold nothing to sync.
func (fs *FS) Fsync(ctx context.Context, p string) error {
	l, err := Parse(p)
	if err != nil {
		return err
	}
	if l.isRoot() || l.isScheme() {
		return nil
	}
	wb := fs.deps.Writeback
	if l.Key != "" {
		if f := wb.Get(l.target()); f != nil {
			err := f.Sync(ctx)
			fs.logErr("fsync", l, err)
			return err
		}
	}
	prefix := l.dirPrefix()
	for _, f := range wb.List(l.Scheme, l.Bucket, prefix) {
		if strings.Contains(strings.TrimPrefix(f.Target().Key, prefix), "/") {
			continue // deeper: that directory's own fsync covers it
		}
		if err := f.Sync(ctx); err != nil {
			fs.logErr("fsync", l.child(strings.TrimPrefix(f.Target().Key, prefix)), err)
			return err
		}
	}
	return nil
}
