package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestFullCacheDisk puts the cache dir on a small tmpfs: a write that would
// fill it gets ENOSPC, and what was already staged still lands.
func TestFullCacheDisk(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	if out, err := exec.Command("mkdir", "-p", e.cache).CombinedOutput(); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", e.cache).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(e.cache, syscall.MNT_DETACH) })
	small := randBytes(t, 20<<20)
	src := writeTemp(t, "small.bin", small)
	r := e.run(fmt.Sprintf(`
cp %[2]s %[1]s/first.bin && echo first=ok
dd if=/dev/zero of=%[1]s/huge.bin bs=1M count=600 2>&1 | grep -o 'No space left on device' | head -1
rm -f %[1]s/huge.bin
exit 0`, e.path(""), src))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "first=ok") || !strings.Contains(r.stdout, "No space left on device") {
		t.Fatalf("want first=ok and ENOSPC, got:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	got, err := e.get("first.bin")
	if err != nil || sha(got) != sha(small) {
		t.Fatalf("first.bin lost after ENOSPC: %v", err)
	}
}
