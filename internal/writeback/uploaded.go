package writeback

import "sync"

// maxUploaded bounds the uploads remembered by Uploaded (the memory is
// cleared when full).
const maxUploaded = 100000

// uploadedObject is what the last upload of a target stored.
type uploadedObject struct {
	version  string
	metadata map[string]string
}

// uploadedSet remembers the version and metadata of the last upload of
// each target, for readers that see objects through listings, which
// carry no metadata on some backends (S3).
type uploadedSet struct {
	mu sync.Mutex // guards m; a leaf lock
	m  map[Target]uploadedObject
}

func (u *uploadedSet) note(t Target, version string, md map[string]string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil || len(u.m) >= maxUploaded {
		u.m = map[Target]uploadedObject{}
	}
	u.m[t] = uploadedObject{version: version, metadata: md}
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
