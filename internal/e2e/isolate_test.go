package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The task's view of ferry's cache directory (--isolate-cache, issue #25).

// dataFiles lists the block cache's data files under cache.
func dataFiles(t *testing.T, cache string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == "data" {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// probeScript is a shell function that runs a command and prints one
// line: "<name> rc=<exit code> out=[<its output on one line>]".
const probeScript = `probe() { n=$1; shift; o=$("$@" 2>&1); echo "$n rc=$? out=[$(printf %s "$o" | tr '\n' ' ')]"; }
`

// probeLine returns the probe line of name in out.
func probeLine(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" rc=") {
			return l
		}
	}
	return ""
}

// TestIsolateTaskView runs a task beside a cached object and a second
// bind of the cache's parent directory: from inside the task, listing,
// reading, writing and deleting under the cache directory (also through
// the other bind) fail or see nothing, a task user other than root may
// not even list it, and the rest of the task's view (/fusion, cwd,
// environment) is unchanged. The cached file is intact afterwards.
func TestIsolateTaskView(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 3<<20+11)
	e.put("in/obj", data)
	e.mustRun("cat " + e.path("in/obj") + " >/dev/null")
	files := dataFiles(t, e.cache)
	if len(files) != 1 {
		t.Fatalf("data files after a read: %v", files)
	}
	df := files[0]
	// The cache's parent seen a second time, elsewhere (a second bind of
	// a host directory): covered there too.
	alt := filepath.Join(t.TempDir(), "alt")
	if err := os.Mkdir(alt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(filepath.Dir(e.cache), alt, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { detachAll(alt) })
	altCache := filepath.Join(alt, filepath.Base(e.cache))
	altData := filepath.Join(altCache, strings.TrimPrefix(df, e.cache))
	if _, err := os.Stat(altData); err != nil {
		t.Fatalf("the data file through the second bind: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	e.extra = []string{"FERRY_TEST_MARK=mark-42"}
	c := e.cache
	out := e.mustRun(probeScript + fmt.Sprintf(`
probe ls ls -A %[1]s
probe find find %[1]s -mindepth 1
probe read cat %[2]s
probe write sh -c 'echo x > %[1]s/poison'
probe mkdir mkdir %[1]s/blocks2
probe overwrite sh -c 'printf zero | dd of=%[2]s conv=notrunc'
probe rm rm -rf %[1]s/blocks %[1]s/writeback
probe alt-ls ls -A %[3]s
probe alt-read cat %[4]s
probe alt-write sh -c 'echo x > %[4]s'
probe user-ls setpriv --reuid=65534 --regid=65534 --clear-groups ls %[1]s
probe fusion sha256sum %[5]s
probe cwd pwd
probe env printenv FERRY_TEST_MARK
`, c, df, altCache, altData, e.path("in/obj")))
	tests := []struct {
		probe string
		ok    bool   // exit 0
		want  string // in its output ("" with ok: no output)
	}{
		{probe: "ls", ok: true},
		{probe: "find", ok: true},
		{probe: "read", want: "No such file"},
		{probe: "write", want: "Read-only file system"},
		{probe: "mkdir", want: "Read-only file system"},
		{probe: "overwrite", want: "No such file"},
		{probe: "rm", ok: true}, // nothing there to remove
		{probe: "alt-ls", ok: true},
		{probe: "alt-read", want: "No such file"},
		{probe: "alt-write", want: "nonexistent"},
		{probe: "user-ls", want: "Permission denied"},
		{probe: "fusion", ok: true, want: sha(data)},
		{probe: "cwd", ok: true, want: "out=[" + wd + "]"},
		{probe: "env", ok: true, want: "out=[mark-42]"},
	}
	for _, tt := range tests {
		l := probeLine(out, tt.probe)
		switch {
		case l == "":
			t.Errorf("%s: no result:\n%s", tt.probe, out)
		case strings.Contains(l, " rc=0 ") != tt.ok:
			t.Errorf("%s: %s, want success %v", tt.probe, l, tt.ok)
		case tt.want == "" && !strings.HasSuffix(l, "out=[]"):
			t.Errorf("%s: %s, want no output", tt.probe, l)
		case !strings.Contains(l, tt.want):
			t.Errorf("%s: %s, want %q", tt.probe, l, tt.want)
		}
	}
	got, err := os.ReadFile(df)
	if err != nil || sha(got) != sha(data) {
		t.Errorf("the cached data file after the task: %v, intact %v", err, err == nil && sha(got) == sha(data))
	}
}

// TestIsolateOtherTenant: a task with credentials for another bucket
// only, on the cache directory of a task that read a secret object, can
// neither open it through /fusion nor find its bytes in the cache. With
// --isolate-cache off it finds them (what the cover prevents).
func TestIsolateOtherTenant(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode  string
		leaks bool
	}{
		{mode: "auto", leaks: false},
		{mode: "off", leaks: true},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			marker := "FERRY-SECRET-" + sha(randBytes(t, 16))[:20]
			e.put("private/secret.txt", []byte(strings.Repeat(marker+"\n", 5000)))
			other := e.srv.NewBucket(t)
			e.mustRun("cat " + e.path("private/secret.txt") + " >/dev/null")
			found := false
			for _, f := range dataFiles(t, e.cache) {
				b, _ := os.ReadFile(f)
				found = found || strings.Contains(string(b), marker)
			}
			if !found {
				t.Fatal("the secret is not in the cache: the test proves nothing")
			}
			ro := assumeRole(t, e.srv, readOnlyPolicy(other))
			e.extra = ro.env()
			r := e.run(fmt.Sprintf(`
cat %[1]s 2>&1 | head -c 300; echo
grep -r -a -o -m1 FERRY-SECRET-[0-9a-f]* %[2]s 2>&1 | head -n 3
ls %[3]s >/dev/null && echo other-bucket-ok
exit 0`, e.path("private/secret.txt"), e.cache, filepath.Join(e.mnt, "s3", other)), "--isolate-cache="+tt.mode)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, tailStr(r.stderr, 4000))
			}
			if !strings.Contains(r.stdout, "other-bucket-ok") {
				t.Errorf("the task cannot use its own bucket:\n%s", r.stdout)
			}
			if !strings.Contains(r.stdout, "Permission denied") {
				t.Errorf("opening the other tenant's object through the mount was not denied:\n%s", r.stdout)
			}
			if got := strings.Contains(r.stdout+r.stderr, marker); got != tt.leaks {
				t.Errorf("--isolate-cache %s: the task saw the secret %v, want %v:\n%s", tt.mode, got, tt.leaks, tailStr(r.stdout, 2000))
			}
		})
	}
}

// TestIsolateEmptyTmpdir: a task that empties $TMPDIR when the cache is
// $TMPDIR/ferry-cache (the default, or a volume mounted there) removes
// everything else; rm reports the covered cache directory as busy (exit
// 1: it is a mount point in the task's namespace) and ferry loses
// nothing: the staged output, whose upload crawls through a slow link
// when rm runs, is uploaded, the cached input stays cached for the next
// task. With --isolate-cache=off, rm empties the cache and the staging
// directory (what the cover prevents; it may also exit 1, racing ferry,
// which makes new staging files meanwhile): the next task fetches the
// input again, and an output not uploaded yet may be lost (exit 174
// naming it).
func TestIsolateEmptyTmpdir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mode   string
		volume bool   // a directory mounted at $TMPDIR/ferry-cache
		rm     string // rm's exit status ("": either, it races ferry's staging)
		left   string // what is left in $TMPDIR (with rm)
		cached bool   // the input is still cached afterwards
	}{
		{name: "default cache dir", mode: "auto", rm: "1", left: "ferry-cache", cached: true},
		{name: "volume at the cache dir", mode: "auto", volume: true, rm: "1", left: "ferry-cache", cached: true},
		{name: "off", mode: "off", cached: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			data := randBytes(t, 2<<20+3)
			e.put("in/obj", data)
			tmp := t.TempDir()
			cache := filepath.Join(tmp, "ferry-cache")
			if tt.volume {
				vol := t.TempDir()
				if err := os.Mkdir(cache, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mount(vol, cache, "", syscall.MS_BIND, ""); err != nil {
					t.Fatalf("bind mount: %v", err)
				}
				t.Cleanup(func() { detachAll(cache) })
			}
			result := randBytes(t, 2<<20)
			src := writeTemp(t, "result.bin", result)
			p := slowUploads(t, e, 512) // the output is still uploading when rm runs
			e.extra = []string{"TMPDIR=" + tmp, "AWS_S3_ENDPOINT=" + p.Endpoint}
			in, out := e.path("in/obj"), e.path("out/result.bin")
			script := fmt.Sprintf(`
echo mine > "$TMPDIR/mine.txt"; mkdir "$TMPDIR/sub"; echo x > "$TMPDIR/sub/f"
sha256sum %[1]s
mkdir -p $(dirname %[2]s); cp %[3]s %[2]s
rm -rf "$TMPDIR"/*; echo rm=$?
echo left=$(ls -A "$TMPDIR")
sha256sum %[1]s %[2]s
`, in, out, src)
			r := e.ferry(2*time.Minute, "run", "--mount-point", e.mnt, "--isolate-cache="+tt.mode, "--drain-timeout", "40s", "--", "sh", "-c", script)
			if tt.mode == "off" && r.code == 174 && strings.Contains(r.stderr, "out/result.bin") {
				t.Logf("--isolate-cache=off: the output was lost with its staging file (exit 174 naming it)")
			} else if r.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, tailStr(r.stderr, 4000))
			}
			wants := []string{sha(result)}
			if tt.rm != "" {
				wants = append(wants, "rm="+tt.rm+"\n", "left="+tt.left+"\n")
			}
			for _, want := range wants {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			if n := strings.Count(r.stdout, sha(data)); n != 2 {
				t.Errorf("%d right checksums of the input, want 2:\n%s", n, r.stdout)
			}
			if busy := strings.Contains(r.stderr, "ferry-cache") && strings.Contains(r.stderr, "busy"); busy != (tt.rm == "1") && tt.rm != "" {
				t.Errorf("rm reports the cache directory as busy: %v, want %v:\n%s", busy, tt.rm == "1", tailStr(r.stderr, 2000))
			}
			if got, err := e.get("out/result.bin"); r.code == 0 && (err != nil || sha(got) != sha(result)) {
				t.Errorf("out/result.bin: %v, intact %v", err, err == nil && sha(got) == sha(result))
			}
			kept := false
			for _, f := range dataFiles(t, cache) {
				b, _ := os.ReadFile(f)
				kept = kept || sha(b) == sha(data)
			}
			if kept != tt.cached {
				t.Errorf("the input is cached after the task: %v, want %v", kept, tt.cached)
			}
			// The next task on the node finds the input in the cache.
			e.extra = []string{"TMPDIR=" + tmp}
			r = e.ferry(2*time.Minute, "run", "--mount-point", e.mnt, "--", "sha256sum", in)
			if r.code != 0 || !strings.Contains(r.stdout, sha(data)) {
				t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, tailStr(r.stderr, 2000))
			}
			if s := parseSummary(t, r.stderr); (s["bytes_downloaded"] == 0) != tt.cached {
				t.Errorf("the second run downloaded %v bytes (cached input: %v)", s["bytes_downloaded"], tt.cached)
			}
		})
	}
}

// TestIsolateFallback starts ferry run where the task's namespace cannot
// be made (ferry not root, mounting through fusermount3; a seccomp
// profile refusing unshare), where it is turned off, and as root of a
// user namespace (a rootless container, where it can be made): auto runs
// the task as before with one warning naming the reason, on fails
// start-up (exit 1) before the task runs, off runs it silently.
func TestIsolateFallback(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	direct := func(args []string) *exec.Cmd { return exec.Command(ferryBin, args...) }
	seccomp := func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], append([]string{ferryBin}, args...)...)
		cmd.Env = []string{denyUnshareEnv + "=1"}
		return cmd
	}
	userns := func(args []string) *exec.Cmd {
		cmd := exec.Command(ferryBin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		}
		return cmd
	}
	// As uid 65534, mounting through the setuid fusermount3, in a private
	// namespace where /dev/fuse is a 0666 node (this machine's is 0600).
	nobody := func(dir string) func(args []string) *exec.Cmd {
		return func(args []string) *exec.Cmd {
			script := fmt.Sprintf(`mknod -m 666 %[1]s/fuse c 10 229 && mount --bind %[1]s/fuse /dev/fuse && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"`, dir)
			return exec.Command("unshare", append([]string{"-m", "sh", "-c", script, "sh", ferryBin}, args...)...)
		}
	}
	const warning = "can reach ferry's cache directory"
	tests := []struct {
		name    string
		launch  func(dir string) func(args []string) *exec.Cmd
		mode    string
		code    int
		reason  string // in the warning (or the error)
		covered bool
		nobody  bool // the directories belong to uid 65534
	}{
		{name: "not root, fusermount3", launch: nobody, mode: "auto", reason: "does not run as root", nobody: true},
		{name: "seccomp refuses unshare", launch: func(string) func([]string) *exec.Cmd { return seccomp }, mode: "auto", reason: "seccomp profile or security module"},
		{name: "seccomp, on", launch: func(string) func([]string) *exec.Cmd { return seccomp }, mode: "on", code: 1, reason: "seccomp profile or security module"},
		{name: "off", launch: func(string) func([]string) *exec.Cmd { return direct }, mode: "off"},
		{name: "user namespace", launch: func(string) func([]string) *exec.Cmd { return userns }, mode: "on", covered: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, err := os.MkdirTemp("", "ferry-e2e-isolate-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { detachAll(filepath.Join(dir, "mnt")); os.RemoveAll(dir) })
			mnt, cache, home := filepath.Join(dir, "mnt"), filepath.Join(dir, "cache"), filepath.Join(dir, "home")
			for _, d := range []string{mnt, cache, home} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				if !tt.nobody {
					continue
				}
				if err := os.Chown(d, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := tt.launch(dir)([]string{"run", "--mount-point", mnt, "--cache-dir", cache, "--isolate-cache=" + tt.mode,
				"--", "sh", "-c", "echo task-ran; ls -A " + cache + "; ls " + mnt})
			cmd.Env = append(append(cmd.Env, e.env...), "HOME="+home)
			var so, se strings.Builder
			cmd.Stdout, cmd.Stderr = &so, &se
			if cmd.SysProcAttr == nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{}
			}
			cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }() // owner: this subtest, which reads done
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-done
				t.Fatalf("ferry run timed out:\n%s", se.String())
			}
			stdout, stderr := so.String(), se.String()
			if got := cmd.ProcessState.ExitCode(); got != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tt.code, stdout, stderr)
			}
			if !strings.Contains(stderr, tt.reason) {
				t.Errorf("stderr lacks the reason %q:\n%s", tt.reason, stderr)
			}
			if tt.code != 0 {
				if !strings.Contains(stderr, "--isolate-cache on") || strings.Contains(stdout, "task-ran") {
					t.Errorf("--isolate-cache on: want start-up to fail before the task, naming the setting:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
				return
			}
			wantWarnings := 0
			if tt.reason != "" {
				wantWarnings = 1
			}
			if n := strings.Count(stderr, warning); n != wantWarnings {
				t.Errorf("%d warnings %q, want %d:\n%s", n, warning, wantWarnings, stderr)
			}
			if !strings.Contains(stdout, "task-ran") || !strings.Contains(stdout, "s3") {
				t.Errorf("the task did not run with its mount:\n%s", stdout)
			}
			if sees := strings.Contains(stdout, "blocks"); sees == tt.covered {
				t.Errorf("the task lists the cache directory's contents: %v, want %v:\n%s", sees, !tt.covered, stdout)
			}
		})
	}
}
