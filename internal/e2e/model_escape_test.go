package e2e

import (
	"os"
	"path/filepath"
	"strings"
)

// escapes reports whether op names a path that, on the reference, resolves
// (through the symlinks the model makes, ".." among them) above the
// directory standing for the bucket: the parent of the model's m. Above
// its bucket, the mount has /fusion/s3 (bucket names, no files) where the
// reference has ordinary directories, so such operations are not
// compared (seed 1795778126483121153: d -> "..", c -> "..", c -> "../a"
// made `open d/c/c O_CREAT` create a file beside the reference's tree,
// and look up a bucket named "a" on the mount).
//
// Nor are changes of the attributes of the bucket's own directory (the
// stand-in itself, reached through symlinks such as a -> ".."): a bucket
// has no object to keep them in, so ferry keeps them only while it runs
// (README, Limits), and the model remounts.
func (m *model) escapes(o op) bool {
	if above, top := m.resolve(o.path); above || top && (o.kind == opChmod || o.kind == opChown || o.kind == opUtimens) {
		return true
	}
	switch o.kind {
	case opRename, opLink:
		return m.resolvesAbove(o.path2)
	}
	return false
}

// resolvesAbove reports whether rel resolves above the bucket's stand-in
// (see resolve).
func (m *model) resolvesAbove(rel string) bool {
	above, _ := m.resolve(rel)
	return above
}

// resolve walks rel from the reference root, following every symlink
// (the last component's too), and reports whether the walk leaves the
// bucket's stand-in (above), or ends on it (top).
func (m *model) resolve(rel string) (above, top bool) {
	root := m.roots[1]
	stand := filepath.Dir(filepath.Dir(root))
	leaves := func(p string) bool {
		r, err := filepath.Rel(stand, p)
		return err != nil || r == ".." || strings.HasPrefix(r, "../")
	}
	cur := root
	comps := strings.Split(rel, "/")
	for links := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			if leaves(cur) {
				return true, false
			}
			continue
		}
		next := filepath.Join(cur, c)
		if fi, err := os.Lstat(next); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(next)
			if links++; err != nil || links > 40 {
				return false, false // ELOOP on both sides
			}
			comps = append(strings.Split(t, "/"), comps...)
			continue
		}
		cur = next
	}
	return false, cur == stand
}
