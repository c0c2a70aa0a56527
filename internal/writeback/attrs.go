package writeback

import (
	"bytes"
	"strconv"
	"syscall"
	"time"
)

// Metadata keys written on uploaded objects (and on directory markers, by
// the vfs). The values are ASCII: modes in octal, ids and device numbers
// in decimal, times in Unix nanoseconds.
const (
	// MetaSymlink holds a symlink's target when it fits (SymlinkInMetadata).
	MetaSymlink = "ferry-symlink"
	// MetaSymlinkBody marks a symlink whose target is the object's body
	// (SymlinkBody): a target too long, or with bytes, that metadata
	// cannot carry on every backend.
	MetaSymlinkBody = "ferry-symlink-body"
	// MetaMode is the permission bits, with the type bits (S_IFMT) of a
	// special file (FIFO, socket, device); none for a regular file,
	// symlink or directory.
	MetaMode  = "ferry-mode"
	MetaUid   = "ferry-uid"
	MetaGid   = "ferry-gid"
	MetaMtime = "ferry-mtime"
	// MetaAtime is kept only when the access time was set explicitly
	// (utimensat); otherwise it reads as the mtime.
	MetaAtime = "ferry-atime"
	MetaCtime = "ferry-ctime"
	// MetaRdev is a device's number (character and block devices).
	MetaRdev = "ferry-rdev"
	// MetaUpload tags every object writeback uploads with a token unique
	// to the upload, journaled before it: a restarted ferry recognises an
	// upload that landed just before a crash (see README.md).
	MetaUpload = "ferry-upload"
)

// Attrs are the POSIX attributes kept with an object.
type Attrs struct {
	// Mode is the permission bits (07777) and, for a special file, its
	// type bits (syscall.S_IFMT).
	Mode    uint32
	HasMode bool
	// Uid and Gid are the owner; without HasOwner the mount's user shows.
	Uid, Gid uint32
	HasOwner bool
	Rdev     uint32
	// Times; zero when not known (Atime: follows Mtime).
	Mtime, Atime, Ctime time.Time
}

// ParseAttrs reads the attributes from an object's user metadata; what
// is missing or malformed stays zero.
func ParseAttrs(md map[string]string) Attrs {
	var a Attrs
	if v, err := strconv.ParseUint(md[MetaMode], 8, 32); err == nil {
		a.Mode, a.HasMode = uint32(v)&(syscall.S_IFMT|0o7777), true
	}
	uid, err1 := strconv.ParseUint(md[MetaUid], 10, 32)
	gid, err2 := strconv.ParseUint(md[MetaGid], 10, 32)
	if err1 == nil && err2 == nil {
		a.Uid, a.Gid, a.HasOwner = uint32(uid), uint32(gid), true
	}
	if v, err := strconv.ParseUint(md[MetaRdev], 10, 32); err == nil {
		a.Rdev = uint32(v)
	}
	a.Mtime = parseNs(md[MetaMtime])
	a.Atime = parseNs(md[MetaAtime])
	a.Ctime = parseNs(md[MetaCtime])
	return a
}

func parseNs(s string) time.Time {
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return timeFromNs(ns)
}

// Encode writes the attributes that are set into md (and removes the
// keys of those that are not).
func (a Attrs) Encode(md map[string]string) {
	delete(md, MetaMode)
	if a.HasMode {
		md[MetaMode] = strconv.FormatUint(uint64(a.Mode&(syscall.S_IFMT|0o7777)), 8)
	}
	delete(md, MetaUid)
	delete(md, MetaGid)
	if a.HasOwner {
		md[MetaUid] = strconv.FormatUint(uint64(a.Uid), 10)
		md[MetaGid] = strconv.FormatUint(uint64(a.Gid), 10)
	}
	delete(md, MetaRdev)
	if a.Rdev != 0 {
		md[MetaRdev] = strconv.FormatUint(uint64(a.Rdev), 10)
	}
	for _, t := range []struct {
		key string
		t   time.Time
	}{{MetaMtime, a.Mtime}, {MetaAtime, a.Atime}, {MetaCtime, a.Ctime}} {
		delete(md, t.key)
		if !t.t.IsZero() {
			md[t.key] = strconv.FormatInt(t.t.UnixNano(), 10)
		}
	}
}

// Symlink targets: a target is kept in user metadata (MetaSymlink) when
// every backend can carry it there: at most SymlinkMetaMax bytes of
// printable ASCII, without a leading or trailing space (HTTP trims header
// values). S3 allows 2 KiB of user metadata in all, Azure and GCS 8 KiB;
// Azure and S3 headers carry ASCII only. Any other target (up to
// PATH_MAX) is the object's body, NUL-padded to SymlinkBodySize bytes,
// with MetaSymlinkBody set: a listing (which carries no metadata) then
// shows every such symlink with that one size, so a reader needs a HEAD
// only for objects of exactly that size to tell them from files.
const (
	SymlinkMetaMax  = 1024
	SymlinkBodySize = pathMax + 1
	pathMax         = 4096 // Linux's PATH_MAX: a target has at most pathMax-1 bytes
)

// SymlinkInMetadata reports whether target is kept in metadata.
func SymlinkInMetadata(target string) bool {
	n := len(target)
	if n == 0 || n > SymlinkMetaMax || target[0] == ' ' || target[n-1] == ' ' {
		return false
	}
	for i := 0; i < n; i++ {
		if c := target[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// SymlinkBody returns the object body of a symlink whose target is kept
// in the body, or nil when it fits metadata (or target is "": not a
// symlink). A target of PATH_MAX bytes or more (which ValidSymlinkTarget
// refuses) has none.
func SymlinkBody(target string) []byte {
	if target == "" || SymlinkInMetadata(target) || len(target) >= pathMax {
		return nil
	}
	b := make([]byte, SymlinkBodySize)
	copy(b, target)
	return b
}

// ParseSymlinkBody returns the target held in a symlink object's body.
func ParseSymlinkBody(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ValidSymlinkTarget reports whether a symlink to target can be stored:
// not empty, no NUL, and short enough for a body (PATH_MAX - 1 bytes).
func ValidSymlinkTarget(target string) error {
	switch {
	case target == "" || bytes.IndexByte([]byte(target), 0) >= 0:
		return syscall.EINVAL
	case len(target) >= pathMax:
		return syscall.ENAMETOOLONG
	}
	return nil
}
