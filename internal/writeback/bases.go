package writeback

import (
	"sync"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// baseIndex finds the files that read from an object (whose base it is)
// without a scan of every file under Manager.mu: detachDependents runs
// before every upload, and a scan per upload is quadratic in the files
// queued (1,000 small files written at once took a second of lock
// convoys).
//
// Invariant: every live file with a base is in the set of its base's key
// (setBaseLocked and indexLive add it; a file leaves the set when its base
// changes or it stops being live). Readers check each file under its lock.
type baseIndex struct {
	mu    sync.Mutex // guards byKey; a leaf lock
	byKey map[string]map[*File]struct{}
}

func (x *baseIndex) add(key string, f *File) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byKey == nil {
		x.byKey = map[string]map[*File]struct{}{}
	}
	set := x.byKey[key]
	if set == nil {
		set = map[*File]struct{}{}
		x.byKey[key] = set
	}
	set[f] = struct{}{}
}

func (x *baseIndex) remove(key string, f *File) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if set := x.byKey[key]; set != nil {
		delete(set, f)
		if len(set) == 0 {
			delete(x.byKey, key)
		}
	}
}

// files returns the files indexed under key.
func (x *baseIndex) files(key string) []*File {
	x.mu.Lock()
	defer x.mu.Unlock()
	set := x.byKey[key]
	out := make([]*File, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	return out
}

// setBaseLocked sets the file's base (nil: none) and keeps the index.
// Caller holds f.mu.
func (f *File) setBaseLocked(b *objstore.ObjectInfo) {
	if old := f.base; old != nil && (b == nil || old.Key != b.Key) {
		f.m.bases.remove(old.Key, f)
	}
	f.base = b
	if b != nil && f.live {
		f.m.bases.add(b.Key, f)
	}
}

// indexLiveLocked indexes the base of a file that becomes live (OpenBase,
// resurrectLocked). Caller holds f.mu or is the only one to see f.
func (f *File) indexLiveLocked() {
	if f.base != nil {
		f.m.bases.add(f.base.Key, f)
	}
}

// unindexLocked takes a file that stops being live out of the index.
// Caller holds f.mu.
func (f *File) unindexLocked() {
	if f.base != nil {
		f.m.bases.remove(f.base.Key, f)
	}
}

// checkBaseIndex makes detachDependents compare the index with a scan of
// every file (tests set it).
var checkBaseIndex bool
