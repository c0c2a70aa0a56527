package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/writeback"
)

// TestFIFOThroughMount: a FIFO made in a work directory on the mount
// carries a producer's output to a consumer (mkfifo p; producer > p &
// consumer < p), and stays a FIFO in the bucket (an empty object whose
// ferry-mode has the FIFO type) after ferry exits.
func TestFIFOThroughMount(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	dir := e.path("work/fifo")
	script := fmt.Sprintf(`set -e
mkdir -p %[1]s && cd %[1]s
mkfifo p
seq 1 200000 > p &
sort -n -r < p | head -n 3 > top.txt
wait
test -p p
stat -c %%F p`, dir)
	out := e.mustRun(script)
	if got := strings.TrimSpace(out); got != "fifo" {
		t.Errorf("stat of the FIFO through the mount: %q", got)
	}
	if got := string(e.mustGet("work/fifo/top.txt")); got != "200000\n199999\n199998\n" {
		t.Errorf("the consumer wrote %q", got)
	}
	info, err := e.stat("work/fifo/p")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := strconv.ParseUint(info.Metadata[writeback.MetaMode], 8, 32); info.Size != 0 || m&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("the FIFO in the bucket: %d bytes, metadata %v", info.Size, info.Metadata)
	}
	// A later task sees the FIFO again and can use it.
	out = e.mustRun(fmt.Sprintf(`cd %s && test -p p && (echo again > p &) && cat p`, dir))
	if strings.TrimSpace(out) != "again" {
		t.Errorf("FIFO after a remount: %q", out)
	}
}

// TestLongSymlinkTarget: a symlink whose 4,000-byte target does not fit
// in object metadata is stored (the target as the object's body) and
// reads back after ferry exits, on every backend; a target over
// PATH_MAX fails at symlink(2) with ENAMETOOLONG, not at the drain.
func TestLongSymlinkTarget(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, e *s3env) {
		target := strings.Repeat("0123456789abcdef/", 235) + "end" // 3,998 bytes
		target += "/x"                                             // 4,000
		dir := e.path("links")
		script := fmt.Sprintf(`set -e
mkdir -p %[1]s && cd %[1]s
ln -s "$(cat %[2]s)" long
ln -s short.txt short
test "$(readlink long)" = "$(cat %[2]s)"
if ln -s "$(cat %[2]s)$(cat %[2]s)" toolong 2>err.txt; then echo made; fi
cat err.txt`, dir, writeTemp(t, "target", []byte(target)))
		out := e.mustRun(script)
		if strings.Contains(out, "made") || !strings.Contains(out, "too long") {
			t.Errorf("an 8,000-byte target: %q, want ENAMETOOLONG", out)
		}
		got := e.mustRun(fmt.Sprintf(`readlink %s/long`, dir))
		if strings.TrimSuffix(got, "\n") != target {
			t.Errorf("readlink after a remount: %d bytes, want %d", len(strings.TrimSuffix(got, "\n")), len(target))
		}
		if got := e.mustRun(fmt.Sprintf(`ls -l %s | grep -c '^l'`, dir)); strings.TrimSpace(got) != "2" {
			t.Errorf("ls -l lists %q symlinks, want 2", got)
		}
		body := e.mustGet("links/long")
		info, _ := e.stat("links/long")
		if len(body) != writeback.SymlinkBodySize || writeback.ParseSymlinkBody(body) != target || info.Metadata[writeback.MetaSymlinkBody] == "" {
			t.Errorf("the object: %d bytes, metadata %v", len(body), info.Metadata)
		}
	})
}

// TestPermissionsAllowOther: with --allow-other the kernel enforces
// modes and owners (default_permissions) for other users, from the
// attributes ferry keeps, before and after a remount; what a user
// creates is theirs.
func TestPermissionsAllowOther(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	// The mount point's parents are the test's temporary directories
	// (0700): let the other user through.
	for _, d := range []string{filepath.Dir(e.mnt), filepath.Dir(filepath.Dir(e.mnt))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mp := startMount(t, e, e.srv.Endpoint, "--allow-other")
	root := e.path("perm")
	p := func(s string) string { return filepath.Join(root, s) }
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"", 0o755}, {"private", 0o700}, {"open", 0o777}, {"sticky", 0o777 | os.ModeSticky}} {
		if err := os.Mkdir(p(d.name), 0o755); err != nil && d.name != "" {
			t.Fatal(err)
		}
		if err := os.Chmod(p(d.name), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"secret", "public", "private/x", "sticky/roots"} {
		if err := os.WriteFile(p(f), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(p("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	nobody := func(t *testing.T, script string) (string, int) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil && cmd.ProcessState == nil {
			t.Fatalf("%s: %v", script, err)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	check := func(t *testing.T) {
		for _, tc := range []struct {
			name, script string
			ok           bool
		}{
			{"read a 0600 file of root's", "cat " + p("secret"), false},
			{"read a 0644 file", "cat " + p("public"), true},
			{"write a 0644 file of root's", "echo x >> " + p("public"), false},
			{"truncate a file of root's", "truncate -s 0 " + p("public"), false},
			{"unlink in a 0755 directory of root's", "rm -f " + p("public"), false},
			{"rename in a 0755 directory of root's", "mv " + p("public") + " " + p("moved"), false},
			{"chmod a file of root's", "chmod 777 " + p("public"), false},
			{"chown to oneself", "chown 65534 " + p("public"), false},
			{"list a 0700 directory", "ls " + p("private"), false},
			{"create in a 0755 directory of root's", "touch " + p("mine"), false},
			{"unlink root's file in a sticky directory", "rm -f " + p("sticky/roots"), false},
		} {
			if out, code := nobody(t, tc.script); (code == 0) != tc.ok {
				t.Errorf("uid 65534: %s: exit %d (%s), want success %v", tc.name, code, strings.TrimSpace(out), tc.ok)
			}
		}
	}
	// What the other user creates is theirs, and theirs to change.
	if out, code := nobody(t, fmt.Sprintf("set -e; echo mine > %[1]s/f; mkdir %[1]s/d; chmod 600 %[1]s/f; mkfifo %[2]s/p; rm -f %[2]s/roots || true",
		p("open"), p("sticky"))); code != 0 {
		t.Fatalf("uid 65534 in a 0777 directory: %s", out)
	}
	wantOwner := func(t *testing.T, path string, uid uint32, mode uint32) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || st.Uid != uid || st.Mode&0o7777 != mode {
			t.Errorf("%s: uid %d mode %o (%v), want uid %d mode %o", path, st.Uid, st.Mode&0o7777, err, uid, mode)
		}
	}
	check(t)
	wantOwner(t, p("open/f"), 65534, 0o600)
	wantOwner(t, p("open/d"), 65534, 0o755)
	wantOwner(t, p("sticky"), 0, 0o1777)
	if code, log := mp.term(t, time.Minute); code != 0 {
		t.Fatalf("ferry exited %d\n%s", code, tailStr(log, 3000))
	}
	startMount(t, e, e.srv.Endpoint, "--allow-other")
	t.Run("after-remount", func(t *testing.T) {
		if _, err := os.ReadDir(root); err != nil { // answers lookups from a listing
			t.Fatal(err)
		}
		check(t)
		wantOwner(t, p("open/f"), 65534, 0o600)
		wantOwner(t, p("sticky/p"), 65534, 0o644)
		wantOwner(t, p("private"), 0, 0o700)
		if out, code := nobody(t, "cat "+p("open/f")); code != 0 || out != "mine\n" {
			t.Errorf("the owner reads its 0600 file: %q, exit %d", out, code)
		}
	})
}
