package writeback

import "fmt"

// The directory index counts the files of Manager.files under each
// directory (a key prefix ending in '/', per bucket), so that asking
// whether a directory holds staged files, which the vfs does for every
// lookup of a missing name, does not scan every file: with 1,000 files
// staged, that scan took 5% of ferry's CPU during a cp of 1,000 files, and
// its cost grows with the square of the files staged.

// dirKey names a directory of a bucket: dir is empty (the bucket's root)
// or ends in '/'.
type dirKey struct{ scheme, bucket, dir string }

// checkDirIndex makes HasUnder and List compare the index with a scan of
// every file, and panic if they differ (tests).
var checkDirIndex bool

// setFileLocked makes f the file at t. Caller holds m.mu.
func (m *Manager) setFileLocked(t Target, f *File) {
	if _, ok := m.files[t]; !ok {
		m.countDirsLocked(t, 1)
	}
	m.files[t] = f
}

// delFileLocked removes the file at t, if any. Caller holds m.mu.
func (m *Manager) delFileLocked(t Target) {
	if _, ok := m.files[t]; ok {
		m.countDirsLocked(t, -1)
		delete(m.files, t)
	}
}

// countDirsLocked adds d to the count of every directory holding t: the
// prefixes of t.Key that end in '/' (exactly the directories D for which
// strings.HasPrefix(t.Key, D)). Caller holds m.mu.
func (m *Manager) countDirsLocked(t Target, d int) {
	for i := 0; i < len(t.Key); i++ {
		if t.Key[i] != '/' {
			continue
		}
		k := dirKey{t.Scheme, t.Bucket, t.Key[:i+1]}
		if n := m.dirs[k] + d; n != 0 {
			m.dirs[k] = n
		} else {
			delete(m.dirs, k)
		}
	}
}

// dirEmptyLocked reports whether the index knows that no file has a key
// starting with prefix (only for prefixes ending in '/'; for others it
// cannot tell and returns false). Caller holds m.mu.
func (m *Manager) dirEmptyLocked(scheme, bucket, prefix string) bool {
	if prefix == "" || prefix[len(prefix)-1] != '/' {
		return false
	}
	empty := m.dirs[dirKey{scheme, bucket, prefix}] == 0
	if checkDirIndex && empty != !m.scanUnderLocked(scheme, bucket, prefix) {
		panic(fmt.Sprintf("writeback: directory index says %s://%s/%s empty=%v, a scan disagrees", scheme, bucket, prefix, empty))
	}
	return empty
}
