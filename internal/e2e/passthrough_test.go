package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPassthroughModes runs a task that reads one input twice (the second
// open finds it whole in the cache) with each --passthrough setting, as
// root and as root of a user namespace (a rootless container: it may
// mount FUSE in its own mount namespace but has no CAP_SYS_ADMIN in the
// initial one, so the kernel refuses backing files): auto falls back to
// reads through ferry with one log line, on fails start-up with exit 1
// and a clear message, off never passes through; the task's bytes are
// right in every case.
func TestPassthroughModes(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	in := randBytes(t, 3<<20+5)
	e.put("pt/in.bin", in)
	dir := t.TempDir()
	tests := []struct {
		name, mode string
		userns     bool
		code       int
		log        string // in stderr
		passed     bool   // the second open passed through
	}{
		{name: "root, auto", mode: "auto", log: "FUSE passthrough on", passed: true},
		{name: "root, off", mode: "off", log: "turned off"},
		{name: "user namespace, auto", mode: "auto", userns: true, log: "FUSE passthrough off"},
		{name: "user namespace, on", mode: "on", userns: true, code: 1, log: "--passthrough on"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mnt := filepath.Join(dir, "mnt", string(rune('a'+i)))
			cache := filepath.Join(dir, "cache", string(rune('a'+i)))
			for _, d := range []string{mnt, cache} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(mnt, "s3", e.bucket, "pt/in.bin")
			so, se := runModeCase(t, e, dir, tt.userns, tt.code, tt.log, "run", "--mount-point", mnt, "--cache-dir", cache, "--passthrough", tt.mode,
				"--", "sh", "-c", "sha256sum "+p+" && sha256sum "+p)
			if tt.code != 0 {
				return
			}
			if n := strings.Count(so, sha(in)); n != 2 {
				t.Fatalf("%d right checksums of 2:\n%s\nstderr:\n%s", n, so, se)
			}
			s := parseSummary(t, se)
			if (s["passthrough_files"] >= 1) != tt.passed || tt.passed && s["bytes_passthrough"] < float64(len(in)) {
				t.Errorf("summary: %v passthrough files (%v bytes), want passthrough %v", s["passthrough_files"], s["bytes_passthrough"], tt.passed)
			}
		})
	}
}

// runModeCase runs ferry with args (with HOME=dir; as root of a user
// namespace of its own with userns: a rootless container), within two
// minutes, and fails unless it exits code with log in its stderr; it
// returns its stdout and stderr.
func runModeCase(t *testing.T, e *s3env, dir string, userns bool, code int, log string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	cmd.Env = append(append([]string{}, e.env...), "HOME="+dir)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if userns {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
	}
	cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ferry timed out\n%s", se.String())
	}
	if got := cmd.ProcessState.ExitCode(); got != code {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", got, code, se.String())
	}
	if !strings.Contains(se.String(), log) {
		t.Errorf("stderr lacks %q:\n%s", log, se.String())
	}
	return so.String(), se.String()
}

// TestDamagedCacheFile damages the cache file of a prefetched object
// (flipped bytes, truncated, a block's bytes zeroed) and reads the object
// through ferry run twice: the damage is found at open (the file no longer
// matches its seal) or at the read, the bad bytes are fetched again, the
// task reads the right bytes every time, and once repaired the file backs
// a passthrough open.
func TestDamagedCacheFile(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 3<<20+77)
	e.put("dmg/obj", data)
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{name: "flipped bytes", damage: func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, 1<<20+12345)
		}},
		{name: "truncated", damage: func(t *testing.T, p string) { os.Truncate(p, 2<<20+5) }},
		{name: "block present but zero", damage: func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			const punchHole, keepSize = 0x2, 0x1
			if err := syscall.Fallocate(int(f.Fd()), punchHole|keepSize, 1<<20, 1<<20); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.RemoveAll(e.cache)
			if r := e.ferry(time.Minute, "prefetch", "--mount-point", e.mnt, "--cache-dir", e.cache, e.path("dmg/obj")); r.code != 0 {
				t.Fatalf("prefetch exited %d:\n%s", r.code, r.stderr)
			}
			var files []string
			filepath.WalkDir(e.cache, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() && d.Name() == "data" {
					files = append(files, p)
				}
				return nil
			})
			if len(files) != 1 {
				t.Fatalf("cache data files: %v", files)
			}
			tt.damage(t, files[0])
			for i := range 2 {
				res := e.run("sha256sum "+e.path("dmg/obj"), "--passthrough", "on")
				if res.code != 0 || !strings.Contains(res.stdout, sha(data)) {
					t.Fatalf("read %d: exit %d\nstdout:\n%s\nstderr:\n%s", i+1, res.code, res.stdout, res.stderr)
				}
				s := parseSummary(t, res.stderr)
				switch {
				case i == 0 && s["bytes_downloaded"] == 0:
					// (the damaged block may be fetched again at open,
					// before the task reads it from the cache: counted
					// as downloaded, not as read from the network)
					t.Errorf("read 1: nothing fetched again: %v", s)
				case i == 1 && s["passthrough_files"] != 1:
					t.Errorf("read 2: the repaired file did not back a passthrough open: %v", s)
				}
			}
		})
	}
}
