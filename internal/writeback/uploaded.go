package writeback

import (
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// maxUploaded bounds the uploads remembered by Uploaded (the memory is
// cleared when full).
const maxUploaded = 100000

// uploadedObject is what the last upload of a target stored.
type uploadedObject struct {
	version  string
	metadata map[string]string
	size     int64
	modTime  time.Time // as the store answered the upload, else when it landed
	seq      uint64    // uploadedSet.seq when it landed
}

// uploadedSet remembers the version and metadata of the last upload of
// each target, for readers that see objects through listings, which
// carry no metadata on some backends (S3).
type uploadedSet struct {
	mu  sync.Mutex // guards m and seq; a leaf lock
	m   map[Target]uploadedObject
	seq uint64 // uploads noted so far
}

func (u *uploadedSet) note(t Target, version string, md map[string]string, size int64, mod time.Time) {
	if mod.IsZero() {
		mod = time.Now()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil || len(u.m) >= maxUploaded {
		u.m = map[Target]uploadedObject{}
	}
	u.seq++
	u.m[t] = uploadedObject{version: version, metadata: md, size: size, modTime: mod, seq: u.seq}
}

func (u *uploadedSet) forget(t Target) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, t)
}

// Uploaded returns the user metadata this manager stored with the object
// at t when its version is version (this manager's last upload there);
// ok is false otherwise. The map is shared: do not modify it.
func (m *Manager) Uploaded(t Target, version string) (md map[string]string, ok bool) {
	m.uploaded.mu.Lock()
	defer m.uploaded.mu.Unlock()
	o, found := m.uploaded.m[t]
	if !found || version == "" || o.version != version {
		return nil, false
	}
	return o.metadata, true
}

// UploadMark returns a mark (never 0) for UploadedInfo: the uploads
// that land from now on pass it, those landed before do not.
func (m *Manager) UploadMark() uint64 {
	m.uploaded.mu.Lock()
	defer m.uploaded.mu.Unlock()
	return m.uploaded.seq + 1
}

// UploadedInfo returns the object this manager's last upload to t made
// (key, version, size, modification time and user metadata) when it
// landed after mark (UploadMark) was taken: for a listing entry of a name
// this mount created when mark was taken. ok is false when mark is 0, or
// no such upload is remembered (none yet, or renamed or removed since).
// The metadata map is shared: do not modify it.
func (m *Manager) UploadedInfo(t Target, mark uint64) (info objstore.ObjectInfo, ok bool) {
	m.uploaded.mu.Lock()
	defer m.uploaded.mu.Unlock()
	o, found := m.uploaded.m[t]
	if !found || mark == 0 || o.seq < mark || o.version == "" {
		return objstore.ObjectInfo{}, false
	}
	return objstore.ObjectInfo{Key: t.Key, Version: o.version, Size: o.size, ModTime: o.modTime, Metadata: o.metadata}, true
}
