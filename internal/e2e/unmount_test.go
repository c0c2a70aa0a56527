package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The end of a mount from outside (fusermount3 -u, umount, umount -l,
// umount -f): ferry notices the end of its FUSE session, drains as on
// SIGTERM and exits.

// waitExit waits for ferry mount to exit by itself and returns its exit
// code and log.
func (m *mountProc) waitExit(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	select {
	case <-m.exited:
	case <-time.After(timeout):
		b, _ := os.ReadFile(m.log.Name())
		t.Fatalf("ferry mount still runs %v after its mount went away:\n%s", timeout, tailStr(string(b), 6000))
	}
	b, _ := os.ReadFile(m.log.Name())
	return m.code, string(b)
}

// running reports whether ferry mount has not exited.
func (m *mountProc) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// unmountCmd runs an unmount command line ("umount -l <mnt>", …).
func unmountCmd(t *testing.T, mustSucceed bool, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil && mustSucceed {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// copyIn writes files (key -> bytes) through the mount with cp in a child
// process. A descriptor the test process opens on the mount lives on in
// any child it forks meanwhile (other parallel tests start processes)
// until that child's exec, and keeps the mount busy for an unmount.
func copyIn(t *testing.T, e *s3env, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		src := filepath.Join(dir, strings.ReplaceAll(k, "/", "_"))
		if err := os.WriteFile(src, v, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", `mkdir -p "$(dirname "$2")" && cp "$1" "$2"`, "sh", src, e.path(k)).CombinedOutput()
		if err != nil {
			t.Fatalf("cp %s: %v\n%s", k, err, out)
		}
	}
}

// stagingDirs lists the staging directories (one per ferry process) left
// in a cache dir: a ferry that exited cleanly leaves none.
func stagingDirs(t *testing.T, cache string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cache, "writeback", "run-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUnmountEndsMount: a plain unmount from outside makes ferry mount
// upload what was written, release its staging directory and exit 0.
func TestUnmountEndsMount(t *testing.T) {
	t.Parallel()
	for _, tool := range [][]string{{"fusermount3", "-u"}, {"umount"}} {
		t.Run(tool[0], func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			m := startMount(t, e, e.srv.Endpoint)
			files := map[string][]byte{"a.bin": randBytes(t, 6<<20+5), "d/b.txt": []byte("b\n"), "d/e/c": nil}
			copyIn(t, e, files)
			unmountCmd(t, true, append(tool, e.mnt)...)
			code, log := m.waitExit(t, 2*time.Minute)
			if code != 0 {
				t.Fatalf("ferry mount exited %d after %s:\n%s", code, tool[0], tailStr(log, 6000))
			}
			if !strings.Contains(log, "from outside") {
				t.Errorf("the log does not say the mount was unmounted:\n%s", tailStr(log, 3000))
			}
			for k, v := range files {
				if got, err := e.get(k); err != nil || !bytes.Equal(got, v) {
					t.Errorf("%s: %d bytes, %v; want %d bytes", k, len(got), err, len(v))
				}
			}
			if d := stagingDirs(t, e.cache); len(d) != 0 {
				t.Errorf("ferry left its staging directory: %v", d)
			}
		})
	}
}

// TestUnmountLazyOpenFile: after umount -l, a file open on the mount keeps
// working (the kernel keeps the session while it is open); ferry exits
// once it is closed, with every byte written before and after in the
// bucket.
func TestUnmountLazyOpenFile(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	m := startMount(t, e, e.srv.Endpoint)
	f, err := os.Create(e.path("open.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("before the unmount\n"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("closed.txt"), []byte("closed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unmountCmd(t, true, "umount", "-l", e.mnt)
	if _, err := f.WriteString("after the unmount\n"); err != nil {
		t.Fatalf("write on the lazily unmounted mount: %v", err)
	}
	if !m.running() {
		_, log := m.waitExit(t, time.Second)
		t.Fatalf("ferry exited while a file was still open on its mount:\n%s", tailStr(log, 4000))
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	code, log := m.waitExit(t, 2*time.Minute)
	if code != 0 {
		t.Fatalf("ferry mount exited %d:\n%s", code, tailStr(log, 6000))
	}
	want := map[string]string{"open.txt": "before the unmount\nafter the unmount\n", "closed.txt": "closed\n"}
	for k, v := range want {
		if got, err := e.get(k); err != nil || string(got) != v {
			t.Errorf("%s = %q, %v; want %q", k, got, err, v)
		}
	}
}

// TestUnmountPendingUploads unmounts while uploads crawl through a slow
// proxy: ferry drains them before it exits (0), or, past --drain-timeout,
// exits 174 naming the path, and the next ferry on the cache dir uploads
// it.
func TestUnmountPendingUploads(t *testing.T) {
	t.Parallel()
	t.Run("drained", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		p := slowUploads(t, e, 100)
		m := startMount(t, e, p.Endpoint)
		data := randBytes(t, 1<<20)
		copyIn(t, e, map[string][]byte{"slow.bin": data})
		if _, err := e.stat("slow.bin"); err == nil {
			t.Fatal("slow.bin was durable before the unmount: the test proves nothing")
		}
		unmountCmd(t, true, "fusermount3", "-u", e.mnt)
		code, log := m.waitExit(t, 3*time.Minute)
		if code != 0 {
			t.Fatalf("ferry mount exited %d:\n%s", code, tailStr(log, 6000))
		}
		if got, err := e.get("slow.bin"); err != nil || sha(got) != sha(data) {
			t.Fatalf("slow.bin not uploaded intact: %d bytes, %v", len(got), err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		p := slowUploads(t, e, 100)
		m := startMount(t, e, p.Endpoint, "--drain-timeout", "3s")
		data := randBytes(t, 1<<20)
		copyIn(t, e, map[string][]byte{"out/late.bin": data})
		p.SetEnabled(t, false)
		unmountCmd(t, true, "umount", e.mnt)
		code, log := m.waitExit(t, 3*time.Minute)
		if code != 174 {
			t.Fatalf("ferry mount exited %d, want 174:\n%s", code, tailStr(log, 6000))
		}
		if !strings.Contains(log, "out/late.bin") {
			t.Errorf("the log does not name out/late.bin:\n%s", tailStr(log, 4000))
		}
		if r := e.run("true"); r.code != 0 {
			t.Fatalf("the next ferry exited %d\n%s", r.code, r.stderr)
		}
		if got, err := e.get("out/late.bin"); err != nil || sha(got) != sha(data) {
			t.Fatalf("the next ferry did not upload late.bin intact: %v", err)
		}
	})
}

// TestRunUnmounted unmounts the mount of ferry run under a running task.
// A plain or forced unmount ends the session: ferry sends the task
// SIGTERM, waits for it, drains what was staged and exits with the task's
// code; the task sees ENOTCONN on a file it had open. A lazy unmount
// while the task works in the mount changes nothing for the task.
func TestRunUnmounted(t *testing.T) {
	t.Parallel()
	t.Run("umount", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		g := newGate(t)
		done := e.startRun(g.prologue() + fmt.Sprintf("mkdir -p %[1]s\necho staged > %[1]s/out.txt\ntrap 'exit 42' TERM\ntouch %[2]s\nsleep 120 &\nwait\nexit 5\n",
			e.path("w"), g.path("ready")))
		g.wait(t, "ready", 2*time.Minute, done)
		unmountCmd(t, true, "umount", e.mnt)
		r := <-done
		if r.code != 42 {
			t.Fatalf("ferry run exited %d, want the task's 42 (SIGTERM trapped)\n%s\n%s", r.code, tailStr(r.stderr, 6000), g.report())
		}
		if !strings.Contains(r.stderr, "from outside") {
			t.Errorf("the log does not say the mount was unmounted:\n%s", tailStr(r.stderr, 3000))
		}
		if got, err := e.get("w/out.txt"); err != nil || string(got) != "staged\n" {
			t.Errorf("w/out.txt = %q, %v", got, err)
		}
	})
	t.Run("umount -f", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		g := newGate(t)
		// bash: its echo names the errno (dash's says "I/O error").
		script := filepath.Join(t.TempDir(), "task.sh")
		body := fmt.Sprintf(`trap '' TERM
mkdir -p %[1]s
exec 3>%[1]s/held.txt
echo first >&3
touch %[2]s
n=0
while echo more >&3 2>>%[3]s; do n=$((n+1)); echo $n > %[4]s; sleep 0.05; done
exit 3
`, e.path("w"), g.path("ready"), g.path("err"), g.path("count"))
		if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		done := e.startRun("exec bash " + script)
		g.wait(t, "ready", 2*time.Minute, done)
		unmountCmd(t, false, "umount", "-f", e.mnt) // aborts the session; the unmount itself fails (busy)
		r := <-done
		if r.code != 3 {
			t.Fatalf("ferry run exited %d, want the task's 3\n%s", r.code, tailStr(r.stderr, 6000))
		}
		// ENOTCONN, or ECONNABORTED for a write in flight at the abort;
		// EPERM when the task wrote its staging file itself (write
		// passthrough: ferry made the file immutable at the abort).
		if b, _ := os.ReadFile(g.path("err")); !strings.Contains(string(b), "Transport endpoint is not connected") && !strings.Contains(string(b), "Software caused connection abort") && !strings.Contains(string(b), "Operation not permitted") {
			t.Errorf("the task's failed write: %q, want ENOTCONN, ECONNABORTED or EPERM", b)
		}
		if !strings.Contains(r.stderr, "w/held.txt") {
			t.Errorf("the log does not name the file ferry closed for the task:\n%s", tailStr(r.stderr, 3000))
		}
		// Every write the task saw succeed is in the bucket.
		cb, _ := os.ReadFile(g.path("count"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(cb)))
		got, err := e.get("w/held.txt")
		k := strings.Count(string(got), "more\n")
		if err != nil || !strings.HasPrefix(string(got), "first\n") || string(got) != "first\n"+strings.Repeat("more\n", k) || k < n || k > n+1 {
			t.Errorf("w/held.txt = %q, %v; want first and %d or %d lines more", got, err, n, n+1)
		}
	})
	t.Run("umount -l", func(t *testing.T) {
		t.Parallel()
		e := newS3Env(t)
		g := newGate(t)
		done := e.startRun(g.prologue() + fmt.Sprintf("mkdir -p %[1]s\ncd %[1]s\nexec 3>held.txt\necho one >&3\ntouch %[2]s\n%[3]s\necho two >&3\nexec 3>&-\necho done > out.txt\n",
			e.path("w"), g.path("ready"), g.shWait("go")))
		g.wait(t, "ready", 2*time.Minute, done)
		unmountCmd(t, true, "umount", "-l", e.mnt)
		g.set(t, "go")
		r := <-done
		if r.code != 0 {
			t.Fatalf("ferry run exited %d\n%s\n%s", r.code, tailStr(r.stderr, 6000), g.report())
		}
		for k, v := range map[string]string{"w/held.txt": "one\ntwo\n", "w/out.txt": "done\n"} {
			if got, err := e.get(k); err != nil || string(got) != v {
				t.Errorf("%s = %q, %v; want %q", k, got, err, v)
			}
		}
	})
}

// TestSharedCacheOwnership: a second ferry on the cache dir of a running
// one takes over nothing of it (its staged file stays its own, not
// uploaded twice), but a ferry started after the first died takes over
// and uploads what it left.
func TestSharedCacheOwnership(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	p := slowUploads(t, e, 100)
	first := startMount(t, e, p.Endpoint)
	data := randBytes(t, 1<<20)
	copyIn(t, e, map[string][]byte{"owned.bin": data})
	p.SetEnabled(t, false) // the first ferry's upload can only retry
	dirs := stagingDirs(t, e.cache)
	if len(dirs) != 1 {
		t.Fatalf("staging dirs of the first ferry: %v", dirs)
	}

	second := filepath.Join(t.TempDir(), "mnt2")
	r := e.ferry(2*time.Minute, "run", "--mount-point", second, "--cache-dir", e.cache, "--", "true")
	if r.code != 0 {
		t.Fatalf("the second ferry exited %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "took over") {
		t.Errorf("the second ferry took over staged files of a running ferry:\n%s", r.stderr)
	}
	if _, err := e.stat("owned.bin"); err == nil {
		t.Fatal("owned.bin was uploaded while its ferry could not reach the store: someone else took it over")
	}
	if d := stagingDirs(t, e.cache); len(d) != 1 || d[0] != dirs[0] {
		t.Fatalf("staging dirs after the second ferry: %v, want %v", d, dirs)
	}

	first.stop(t) // SIGKILL: it leaves its staged file and journal behind
	r = e.ferry(2*time.Minute, "run", "--mount-point", second, "--cache-dir", e.cache, "--", "true")
	if r.code != 0 {
		t.Fatalf("the third ferry exited %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "took over the staged files of a stopped ferry") {
		t.Errorf("the third ferry does not say it took over the dead one's files:\n%s", r.stderr)
	}
	if got, err := e.get("owned.bin"); err != nil || sha(got) != sha(data) {
		t.Fatalf("owned.bin not uploaded intact after the first ferry died: %v", err)
	}
	if d := stagingDirs(t, e.cache); len(d) != 0 {
		t.Errorf("staging dirs left: %v", d)
	}
}
