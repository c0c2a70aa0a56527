package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// Cold passthrough through real mounts: tasks on several ferry mounts
// that share one cache dir read a cold object at once; each block is
// fetched once, the kernel reads the cache file (no FUSE reads), and
// every task gets the object's bytes.

// metricSum sums the samples of metric name whose labels contain label.
func metricSum(text, name, label string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if label != "" && !strings.Contains(line, label) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// slowProxy is a toxiproxy in front of MinIO that makes reads of a few
// tens of MiB take seconds: 20 ms per response and kbps per connection.
func slowProxy(t *testing.T, e *s3env, kbps int64) string {
	t.Helper()
	p := testenv.Toxiproxy(t, e.srv.Endpoint)
	p.AddLatency(t, 20*time.Millisecond, 0)
	p.AddBandwidth(t, kbps)
	return p.Endpoint
}

// mountPath is the path of key under the mount point mnt.
func (e *s3env) mountPath(mnt, key string) string {
	return filepath.Join(mnt, e.scheme, e.bucket, key)
}

// sha256Of hashes a file with sha256sum (a real tool reading through the
// mount), returning the hex digest or the error output.
func sha256Of(p string) (string, error) {
	out, err := exec.Command("sha256sum", p).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sha256sum %s: %v: %s", p, err, out)
	}
	return strings.Fields(string(out))[0], nil
}

// TestColdSharedCache: 2, then 4 tasks, one ferry run each on one cache
// dir, read one cold object at once: each gets its bytes, the kernel
// reads the cache file (no FUSE reads, and no FLUSH at close: each task
// asks its own ferry for /metrics before it exits), and the ferrys fetch
// each block once.
func TestColdSharedCache(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 24<<20+4321)
	e.put("cold/ref.bin", data)
	e.extra = []string{"AWS_S3_ENDPOINT=" + slowProxy(t, e, 40<<10)}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d tasks", n), func(t *testing.T) {
			dir := t.TempDir()
			var done []<-chan result
			for i := range n {
				port, err := testenv.FreePort()
				if err != nil {
					t.Fatal(err)
				}
				m := filepath.Join(dir, fmt.Sprintf("m%d", i))
				script := fmt.Sprintf("sha256sum %s && curl -s http://127.0.0.1:%d/metrics > %s/metrics%d",
					e.mountPath(m, "cold/ref.bin"), port, dir, i)
				d, _ := e.startRunAt(m, filepath.Join(dir, "cache"), script,
					"--cold-passthrough", "on", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
				done = append(done, d)
			}
			var fetched float64
			for i, d := range done {
				r := <-d
				if r.code != 0 || !strings.Contains(r.stdout, sha(data)) {
					t.Errorf("task %d: exit %d, want the object's checksum:\n%s\n%s", i, r.code, r.stdout, tailStr(r.stderr, 3000))
					continue
				}
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("metrics%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				text := string(b)
				if reads := metricSum(text, "ferry_fuse_ops_total", `op="read"`); reads != 0 {
					t.Errorf("task %d's ferry served %v FUSE reads, want 0 (the kernel reads the cache file)", i, reads)
				}
				if flushes := metricSum(text, "ferry_fuse_ops_total", `op="flush"`); flushes != 0 {
					t.Errorf("task %d's ferry got %v FUSE flushes, want 0 (read-only passthrough opens close without one)", i, flushes)
				}
				if cold := metricSum(text, "ferry_cache_cold_opens_total", ""); cold < 1 {
					t.Errorf("task %d's ferry: %v cold opens, want >= 1", i, cold)
				}
				fetched += parseSummary(t, r.stderr)["bytes_downloaded"]
			}
			if fetched != float64(len(data)) {
				t.Errorf("the ferrys fetched %v bytes together, want %d (each block once)", fetched, len(data))
			}
		})
	}
}

// TestColdPassthroughModes: cold passthrough on ext4 as root, and the
// fallbacks, each with its one log line at mount: a cache dir on tmpfs
// or overlayfs, no CAP_SYS_ADMIN in the initial user namespace, turned
// off; with --cold-passthrough on, a fallback is a start-up failure.
func TestColdPassthroughModes(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	in := randBytes(t, 3<<20+5)
	e.put("cpt/in.bin", in)
	dir := t.TempDir()
	tmpfs := filepath.Join(dir, "tmpfs")
	ovl := filepath.Join(dir, "ovl")
	for _, d := range []string{tmpfs, ovl + "/l", ovl + "/u", ovl + "/w", ovl + "/m"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(tmpfs, syscall.MNT_DETACH) })
	if err := syscall.Mount("overlay", ovl+"/m", "overlay", 0, "lowerdir="+ovl+"/l,upperdir="+ovl+"/u,workdir="+ovl+"/w"); err != nil {
		t.Fatalf("mount an overlayfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(ovl+"/m", syscall.MNT_DETACH) })
	tests := []struct {
		name, mode, cache string
		userns            bool
		code              int
		log               string
		cold              bool // the open passed through cold
	}{
		{name: "ext4, auto", mode: "auto", log: "cold passthrough on", cold: true},
		{name: "ext4, off", mode: "off", log: "--cold-passthrough off"},
		{name: "tmpfs, auto", mode: "auto", cache: tmpfs, log: "tmpfs"},
		{name: "tmpfs, on", mode: "on", cache: tmpfs, code: 1, log: "--cold-passthrough on"},
		{name: "overlayfs, auto", mode: "auto", cache: ovl + "/m", log: "overlayfs"},
		{name: "user namespace, auto", mode: "auto", userns: true, log: "FUSE passthrough is off"},
		{name: "user namespace, on", mode: "on", userns: true, code: 1, log: "--cold-passthrough on"},
		{name: "ferry run, unguarded", mode: "unguarded", log: "every process", cold: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mnt := filepath.Join(dir, "mnt", strconv.Itoa(i))
			cache := filepath.Join(cmpOr(tt.cache, dir), "cache", strconv.Itoa(i))
			p := filepath.Join(mnt, "s3", e.bucket, "cpt/in.bin")
			so, se := runModeCase(t, e, dir, tt.userns, tt.code, tt.log,
				"run", "--mount-point", mnt, "--cache-dir", cache, "--cold-passthrough", tt.mode, "--", "sha256sum", p)
			if tt.code != 0 {
				return
			}
			if strings.Count(se, "cold passthrough") != 1 {
				t.Errorf("want one log line about cold passthrough:\n%s", se)
			}
			if !strings.Contains(so, sha(in)) {
				t.Fatalf("wrong checksum:\n%s\nstderr:\n%s", so, se)
			}
			s := parseSummary(t, se)
			if (s["passthrough_cold_files"] >= 1) != tt.cold {
				t.Errorf("summary: %v cold passthrough files, want cold %v", s["passthrough_cold_files"], tt.cold)
			}
		})
	}
}

// TestColdPassthroughMount: ferry mount has no task of its own to guard:
// auto leaves cold passthrough off (one log line saying why), on is a
// start-up failure, unguarded passes every process's opens through.
func TestColdPassthroughMount(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 2<<20+9)
	e.put("cm/in.bin", data)
	for _, tt := range []struct {
		mode, log string
		code      int
		cold      bool
	}{
		{"auto", "no task of its own", 0, false},
		{"on", "--cold-passthrough on", 1, false},
		{"unguarded", "every process", 0, true},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if tt.code != 0 {
				r := e.ferry(time.Minute, "mount", "--cache-dir", filepath.Join(dir, "cache"), "--cold-passthrough", tt.mode, mnt)
				if r.code != tt.code || !strings.Contains(r.stderr, tt.log) {
					t.Fatalf("exit %d, want %d with %q:\n%s", r.code, tt.code, tt.log, r.stderr)
				}
				return
			}
			port, err := testenv.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			m := startMountAt(t, e, e.srv.Endpoint, mnt, filepath.Join(dir, "cache"), "--cold-passthrough", tt.mode, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
			if got, err := sha256Of(e.mountPath(mnt, "cm/in.bin")); err != nil || got != sha(data) {
				t.Fatalf("sha %s, %v; want %s", got, err, sha(data))
			}
			text, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
			if err != nil {
				t.Fatal(err)
			}
			if cold := metricSum(text, "ferry_cache_cold_opens_total", "") >= 1; cold != tt.cold {
				t.Errorf("cold opens: %v, want %v", cold, tt.cold)
			}
			_, log := m.term(t, time.Minute)
			if !strings.Contains(log, tt.log) {
				t.Errorf("log lacks %q:\n%s", tt.log, log)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
