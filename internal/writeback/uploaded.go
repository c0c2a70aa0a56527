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
}

// uploadedSet remembers the version and metadata of the last upload of
// each target, for readers that see objects through listings, which
// carry no metadata on some backends (S3).
type uploadedSet struct {
	mu sync.Mutex // guards m; a leaf lock
	m  map[Target]uploadedObject
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
	u.m[t] = uploadedObject{version: version, metadata: md, size: size, modTime: mod}
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

// UploadedInfo returns the object this manager's last upload to t made
// (key, version, size, modification time and user metadata), for a
// listing that holds t's name as created through the mount; ok is false
// when none is remembered (never uploaded here, or renamed, removed or
// written again since). The metadata map is shared: do not modify it.
func (m *Manager) UploadedInfo(t Target) (info objstore.ObjectInfo, ok bool) {
	m.uploaded.mu.Lock()
	defer m.uploaded.mu.Unlock()
	o, found := m.uploaded.m[t]
	if !found || o.version == "" {
		return objstore.ObjectInfo{}, false
	}
	return objstore.ObjectInfo{Key: t.Key, Version: o.version, Size: o.size, ModTime: o.modTime, Metadata: o.metadata}, true
}
