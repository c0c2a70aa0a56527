package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestColdFailures: what a task reads through a cold passthrough open
// when the fetch fails, when the cache file is evicted while it is open,
// and when a cached block was damaged: the object's bytes or EIO, never
// the zeros of a hole or damaged bytes.
func TestColdFailures(t *testing.T) {
	t.Parallel()
	t.Run("the fetch fails: EIO", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		e.put("f/obj", randBytes(t, 12<<20))
		g := newGate(t)
		script := g.prologue() + fmt.Sprintf(`python3 - <<'PY'
import os
fd = os.open(%[1]q, os.O_RDONLY)
assert len(os.pread(fd, 4096, 0)) == 4096
open(%[2]q, "w").close()
while not os.path.exists(%[3]q):
    pass
try:
    b = os.pread(fd, 4096, 8 << 20)
    print("read", len(b), "bytes, zeros:", b.count(0))
except OSError as e:
    print("error", e.errno)
PY`, e.path("f/obj"), g.path("opened"), g.path("changed"))
		// No background fill: it would make the open version whole before
		// the object changes, and the read would then get its bytes.
		done := e.startRun(script, "--cold-passthrough", "on", "--fill-random-up-to", "0")
		g.wait(t, "opened", 2*time.Minute, done)
		e.put("f/obj", randBytes(t, 12<<20)) // the version open is gone
		g.set(t, "changed")
		r := <-done
		if r.code != 0 || !strings.Contains(r.stdout, "error 5") {
			t.Fatalf("exit %d; want EIO (error 5) for a range whose version is gone:\n%s\n%s", r.code, r.stdout, tailStr(r.stderr, 3000))
		}
	})
	t.Run("evicted while open", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		var objs [][]byte
		for i := range 3 {
			objs = append(objs, randBytes(t, 20<<20+i))
			e.put(fmt.Sprintf("ev/%d", i), objs[i])
		}
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf(`python3 - <<'PY'
import hashlib, os, subprocess
fd = os.open(%[1]q, os.O_RDONLY)
head = os.pread(fd, 4 << 20, 0)
for p in (%[2]q, %[3]q):
    subprocess.run(["cat", p], stdout=subprocess.DEVNULL, check=True)
m = subprocess.run(["curl", "-s", "http://127.0.0.1:%[4]d/metrics"], capture_output=True, text=True).stdout
ev = sum(float(l.split()[-1]) for l in m.splitlines() if l.startswith("ferry_cache_evictions_total"))
rest = b""
while True:
    b = os.pread(fd, 1 << 20, len(head) + len(rest))
    if not b:
        break
    rest += b
print("evictions", ev, "sha", hashlib.sha256(head + rest).hexdigest())
PY`, e.path("ev/0"), e.path("ev/1"), e.path("ev/2"), port)
		out := e.mustRun(script, "--cold-passthrough", "on", "--cache-size", "48MiB", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
		if !strings.Contains(out, "sha "+sha(objs[0])) || strings.Contains(out, "evictions 0") {
			t.Fatalf("want evictions and the first object's bytes read through its open after them:\n%s", out)
		}
	})
	t.Run("a mapping outlives its descriptor", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		data := randBytes(t, 9<<20+11)
		e.put("m/obj", data)
		script := fmt.Sprintf(`python3 - <<'PY'
import hashlib, mmap, os, time
fd = os.open(%[1]q, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
os.close(fd)
time.sleep(3)  # the open is released; the evictor's sweep runs meanwhile
print("sha", hashlib.sha256(m[:]).hexdigest())
PY`, e.path("m/obj"))
		out := e.mustRun(script, "--cold-passthrough", "on")
		if !strings.Contains(out, "sha "+sha(data)) {
			t.Fatalf("want the object's bytes through a mapping whose descriptor was closed:\n%s", out)
		}
	})
	t.Run("an exec of a file open cold", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		bin, err := exec.LookPath("true")
		if err != nil {
			t.Fatal(err)
		}
		// An executable object (mode in its metadata), then, from a cold
		// cache, the task opens it (a cold passthrough open: the binary's
		// cache file is sparse) and executes it: the exec waits until the
		// file is whole (the kernel maps a binary without asking).
		e.mustRun(fmt.Sprintf("mkdir -p %s && cp %s %s && chmod 755 %s", e.path("x"), bin, e.path("x/prog"), e.path("x/prog")))
		e.cache = filepath.Join(t.TempDir(), "cache2")
		out := e.mustRun(fmt.Sprintf("exec 3< %s; %s && echo ran", e.path("x/prog"), e.path("x/prog")), "--cold-passthrough", "on")
		if !strings.Contains(out, "ran") {
			t.Fatalf("the program did not run:\n%s", out)
		}
	})
	t.Run("a damaged block is fetched again", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		data := randBytes(t, 5<<20+3)
		e.put("d/obj", data)
		e.mustRun("head -c 3145728 "+e.path("d/obj")+" >/dev/null", "--cold-passthrough", "on")
		files, _ := filepath.Glob(filepath.Join(e.cache, "blocks", "v3", "*", "*", "data"))
		if len(files) != 1 {
			t.Fatalf("cache data files %v, want one", files)
		}
		f, err := os.OpenFile(files[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("damage"), 1<<20+777)
		f.Close()
		r := e.run("sha256sum "+e.path("d/obj"), "--cold-passthrough", "on")
		if r.code != 0 || !strings.Contains(r.stdout, sha(data)) {
			t.Fatalf("exit %d, want the object's checksum:\n%s\n%s", r.code, r.stdout, tailStr(r.stderr, 3000))
		}
		if s := parseSummary(t, r.stderr); s["passthrough_cold_files"] < 1 {
			t.Errorf("summary: %v cold passthrough files, want >= 1", s["passthrough_cold_files"])
		}
	})
}
