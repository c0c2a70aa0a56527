package writeback

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

func TestAttrsRoundTrip(t *testing.T) {
	tests := []Attrs{
		{},
		{Mode: 0o644, HasMode: true},
		{Mode: syscall.S_IFIFO | 0o600, HasMode: true, Uid: 65534, Gid: 65533, HasOwner: true},
		{Mode: syscall.S_IFCHR | 0o620, HasMode: true, Rdev: 0x0501, Mtime: time.Unix(1, 2), Atime: time.Unix(3, 4), Ctime: time.Unix(5, 6)},
		{Mode: 0, HasMode: true, Uid: 0, Gid: 0, HasOwner: true},
	}
	for _, a := range tests {
		md := map[string]string{"other": "kept", MetaAtime: "stale"}
		a.Encode(md)
		got := ParseAttrs(md)
		if got.Mode != a.Mode || got.HasMode != a.HasMode || got.Uid != a.Uid || got.Gid != a.Gid || got.HasOwner != a.HasOwner ||
			got.Rdev != a.Rdev || !got.Mtime.Equal(a.Mtime) || !got.Atime.Equal(a.Atime) || !got.Ctime.Equal(a.Ctime) {
			t.Errorf("%+v: encoded %v, parsed back %+v", a, md, got)
		}
		if md["other"] != "kept" {
			t.Errorf("%+v: Encode dropped another key: %v", a, md)
		}
	}
}

func TestSymlinkEncoding(t *testing.T) {
	tests := []struct {
		target string
		inMeta bool
		err    error
	}{
		{target: "a/b", inMeta: true},
		{target: strings.Repeat("x", SymlinkMetaMax), inMeta: true},
		{target: strings.Repeat("x", SymlinkMetaMax+1)},
		{target: " lead"},
		{target: "trail "},
		{target: "é"},
		{target: "tab\there"},
		{target: strings.Repeat("y", 4095)},
		{target: strings.Repeat("y", 4096), err: syscall.ENAMETOOLONG},
		{target: "", err: syscall.EINVAL},
		{target: "nul\x00", err: syscall.EINVAL},
	}
	for _, tt := range tests {
		if err := ValidSymlinkTarget(tt.target); err != tt.err {
			t.Errorf("ValidSymlinkTarget(%.20q) = %v, want %v", tt.target, err, tt.err)
		}
		if tt.err != nil {
			continue
		}
		if got := SymlinkInMetadata(tt.target); got != tt.inMeta {
			t.Errorf("SymlinkInMetadata(%.20q) = %v", tt.target, got)
		}
		body := SymlinkBody(tt.target)
		switch {
		case tt.inMeta && body != nil:
			t.Errorf("%.20q: a body for a target kept in metadata", tt.target)
		case !tt.inMeta && (len(body) != SymlinkBodySize || ParseSymlinkBody(body) != tt.target):
			t.Errorf("%.20q: body of %d bytes reads back %.20q", tt.target, len(body), ParseSymlinkBody(body))
		}
	}
}

// TestNodeUpload: symlinks and special files upload as objects with
// their attributes in metadata; a long target as the body.
func TestNodeUpload(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	long := strings.Repeat("t/", 1500)
	owner := Attrs{Uid: 1000, Gid: 1001, HasOwner: true}
	if err := m.Node(tgt("fifo"), "", Attrs{Mode: syscall.S_IFIFO | 0o640, Uid: 1000, Gid: 1001, HasOwner: true}); err != nil {
		t.Fatal(err)
	}
	if err := m.Node(tgt("dev"), "", Attrs{Mode: syscall.S_IFBLK | 0o600, Rdev: 0x0801}); err != nil {
		t.Fatal(err)
	}
	a := owner
	a.Mode = 0o777
	if err := m.Node(tgt("long"), long, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Node(tgt("bad"), "", Attrs{Mode: syscall.S_IFDIR | 0o755}); err != syscall.EINVAL {
		t.Errorf("Node of a directory: %v, want EINVAL", err)
	}
	drain(t, m)
	for _, tt := range []struct {
		key  string
		size int64
		want map[string]string
	}{
		{"fifo", 0, map[string]string{MetaMode: "10640", MetaUid: "1000", MetaGid: "1001"}},
		{"dev", 0, map[string]string{MetaMode: "60600", MetaRdev: "2049"}},
		{"long", SymlinkBodySize, map[string]string{MetaSymlinkBody: "1", MetaUid: "1000"}},
	} {
		info, err := e.mem.Stat(context.Background(), tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size != tt.size {
			t.Errorf("%s: %d bytes, want %d", tt.key, info.Size, tt.size)
		}
		for k, v := range tt.want {
			if info.Metadata[k] != v {
				t.Errorf("%s: metadata %s = %q, want %q (%v)", tt.key, k, info.Metadata[k], v, info.Metadata)
			}
		}
		if _, ok := info.Metadata[MetaCtime]; !ok {
			t.Errorf("%s: no ctime in %v", tt.key, info.Metadata)
		}
	}
	b, _ := e.object("long")
	if ParseSymlinkBody(b) != long {
		t.Errorf("long target body reads %d bytes", len(ParseSymlinkBody(b)))
	}
}

// TestRecoverNodeAndOwner: a special file and a file's owner and times
// survive a crash before their upload.
func TestRecoverNodeAndOwner(t *testing.T) {
	e := newEnv(t)
	e.setFaults(stallUploads())
	m1 := e.manager()
	if err := m1.Node(tgt("sock"), "", Attrs{Mode: syscall.S_IFSOCK | 0o755, Uid: 5, Gid: 6, HasOwner: true}); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1234, 5678)
	f, err := m1.CreateWith(tgt("f"), Attrs{Mode: 0o600, Uid: 7, Gid: 8, HasOwner: true, Atime: at})
	if err != nil {
		t.Fatal(err)
	}
	f.Acquire()
	f.WriteAt([]byte("data"), 0)
	f.Release()
	m1.Close()
	e.setFaults(faulty.Config{})
	m2 := e.manager()
	drain(t, m2)
	info, _ := e.mem.Stat(context.Background(), "sock")
	if info.Size != 0 || info.Metadata[MetaMode] != "140755" || info.Metadata[MetaUid] != "5" {
		t.Errorf("recovered socket: %d bytes, %v", info.Size, info.Metadata)
	}
	e.wantObject("f", []byte("data"))
	info, _ = e.mem.Stat(context.Background(), "f")
	if got := ParseAttrs(info.Metadata); got.Mode != 0o600 || got.Uid != 7 || got.Gid != 8 || !got.Atime.Equal(at) || got.Mtime.IsZero() {
		t.Errorf("recovered file attributes %+v", got)
	}
}

// TestChangeDroppedNode: a change to a symlink or special file that was
// durable and dropped (a caller held it from before) brings it back and
// uploads the change.
func TestChangeDroppedNode(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, key := liveNode(t, m, "p", "", Attrs{Mode: syscall.S_IFIFO | 0o644})
	drain(t, m)
	if m.Get(tgt(key)) != nil {
		t.Fatal("the durable FIFO was not dropped")
	}
	f.UpdateAttrs(func(a *Attrs) { a.Gid, a.HasOwner = 42, true })
	drain(t, m)
	info, err := e.mem.Stat(context.Background(), key)
	if err != nil || info.Metadata[MetaGid] != "42" || info.Metadata[MetaMode] != "10644" {
		t.Errorf("after a change of the dropped FIFO: %v, %v", info.Metadata, err)
	}
}

// TestChangeRacingDrop: a change to a symlink whose upload lands and
// drops it between the check for a dropped file and the change (vfs
// TestAttrsPersisted lost an lchown that way under load) brings it back
// and uploads the change.
func TestChangeRacingDrop(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, key := liveNode(t, m, "l", "target", Attrs{Mode: 0o777})
	hooked := false
	testHookAfterEnsureLive = func(*File) {
		if !hooked {
			hooked = true
			drain(t, m) // the upload lands and drops the file
		}
	}
	t.Cleanup(func() { testHookAfterEnsureLive = nil })
	f.UpdateAttrs(func(a *Attrs) { a.Uid, a.Gid, a.HasOwner = 7, 42, true })
	if !hooked {
		t.Fatal("the hook did not run")
	}
	drain(t, m)
	info, err := e.mem.Stat(context.Background(), key)
	if err != nil || info.Metadata[MetaGid] != "42" || info.Metadata[MetaUid] != "7" {
		t.Errorf("after a change racing the drop: %v, %v", info.Metadata, err)
	}
}

// liveNode makes a symlink (target set) or special file under a name
// starting with prefix and returns it while still held by m with its name:
// a node may upload and be dropped before Get on a loaded machine, and
// then another name is tried.
func liveNode(t *testing.T, m *Manager, prefix, target string, a Attrs) (*File, string) {
	t.Helper()
	for i := range 20 {
		key := fmt.Sprintf("%s%d", prefix, i)
		if err := m.Node(tgt(key), target, a); err != nil {
			t.Fatal(err)
		}
		if f := m.Get(tgt(key)); f != nil {
			return f, key
		}
	}
	t.Fatalf("every %s node was dropped before Get", prefix)
	return nil, ""
}
