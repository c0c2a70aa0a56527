package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// A mount table: the root, /tmp on its own device, ferry's shared bind
// of its mount point and its FUSE mount on it (slave copies, as in the
// task's namespace), another FUSE daemon's private mount with one below
// it, a slave FUSE mount (its unmount propagates), a second bind of
// /tmp/x, and a mount point with a space.
const testMountinfo = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 0:40 / /tmp rw,relatime - tmpfs tmpfs rw
40 30 0:40 /run/mnt /tmp/run/mnt rw,relatime master:1 - tmpfs tmpfs rw
41 40 0:47 / /tmp/run/mnt rw,nosuid,nodev,relatime master:2 - fuse.ferry ferry rw,user_id=0
50 30 0:48 / /tmp/other rw,relatime - fuse.sshfs host:/ rw
51 50 0:49 / /tmp/other/inner rw,relatime - fuse.ferry ferry rw
52 22 0:50 / /mnt/shared rw,relatime master:7 - fuse.rclone r: rw
60 22 0:40 /x /mnt/x\040y rw,relatime - tmpfs tmpfs rw
61 22 0:51 / /proc/fs/fuse rw - fuse.x x rw
`

func TestMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(testMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 9 || ms[7].point != "/mnt/x y" || ms[7].root != "/x" || ms[1].dev != "0:40" || ms[3].fstype != "fuse.ferry" {
		t.Fatalf("parsed %+v", ms)
	}
	top := tops(ms)
	if top["/tmp/run/mnt"].id != 41 {
		t.Errorf("top at the mount point: %d, want the FUSE mount 41", top["/tmp/run/mnt"].id)
	}
	tests := []struct {
		path  string
		mount int
	}{
		{"/tmp/ferry-cache", 30},
		{"/tmp", 30},
		{"/tmpx", 22},
		{"/tmp/run/mnt/s3", 41},
		{"/etc", 22},
	}
	for _, tt := range tests {
		if m, ok := mountOf(top, tt.path); !ok || m.id != tt.mount {
			t.Errorf("mountOf(%s) = %d, want %d", tt.path, m.id, tt.mount)
		}
	}
	if !selfBind(ms, ms[2]) || selfBind(ms, ms[3]) || selfBind(ms, ms[7]) {
		t.Errorf("selfBind: the bind of /tmp/run/mnt %v (want true), the FUSE mount %v, the bind of /x elsewhere %v (want false)",
			selfBind(ms, ms[2]), selfBind(ms, ms[3]), selfBind(ms, ms[7]))
	}
	if got, want := foreignFUSE(ms, "0:47"), []string{"/tmp/other"}; !reflect.DeepEqual(got, want) {
		t.Errorf("foreign FUSE mounts to detach: %v, want %v (not ferry's own, not a slave, not below another, not under /proc)", got, want)
	}
	for in, want := range map[string]string{`a\040b`: "a b", `a\134b`: `a\b`, `a\0`: `a\0`, "plain": "plain"} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCoverPaths: with mounts of the cache's file system that show it
// only at its own path, or not at all, the cover is the cache directory
// alone, listed once. (A real second place, a bind of its parent, is
// TestIsolateTaskView's, in internal/e2e.)
func TestCoverPaths(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(cache, &st); err != nil {
		t.Fatal(err)
	}
	dev := devMajorMinor(uint64(st.Dev))
	// The test's temp dir stands in for another mount of the same file
	// system showing the cache's parent: the path is the real directory.
	ms := []mountEntry{
		{id: 1, parent: 0, dev: dev, root: "/", point: "/"},
		{id: 2, parent: 1, dev: dev, root: dir, point: dir},               // shows dir at dir: the same place
		{id: 3, parent: 1, dev: dev, root: "/nonexistent", point: "/mnt"}, // another part of the file system
	}
	got := coverPaths(ms, cache)
	if !reflect.DeepEqual(got, []string{cache}) {
		t.Errorf("coverPaths = %v, want [%s]", got, cache)
	}
}

func TestUnshareError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{syscall.EINVAL, "no mount namespaces"},
		{syscall.ENOMEM, "unshare(CLONE_NEWNS)"},
	} {
		if got := unshareError(tt.err); !strings.Contains(got.Error(), tt.want) || !errors.Is(got, tt.err) {
			t.Errorf("unshareError(%v) = %v, want %q wrapping it", tt.err, got, tt.want)
		}
	}
	// EPERM: as root with CAP_SYS_ADMIN (these tests run so), the reason
	// is a policy.
	if hasCapSysAdmin() && !strings.Contains(unshareError(syscall.EPERM).Error(), "seccomp") {
		t.Errorf("EPERM with CAP_SYS_ADMIN: %v", unshareError(syscall.EPERM))
	}
}
