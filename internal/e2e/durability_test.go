package e2e

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// slowUploads puts a toxiproxy in front of MinIO whose request bodies
// crawl at kbps KB/s, so uploads are still in flight when the test strikes.
func slowUploads(t *testing.T, e *s3env, kbps int64) *testenv.Proxy {
	p := testenv.Toxiproxy(t, e.srv.Endpoint)
	p.AddToxic(t, testenv.Toxic{Name: "slowup", Type: "bandwidth", Stream: "upstream", Toxicity: 1, Attributes: map[string]any{"rate": kbps}})
	return p
}

func waitFile(t *testing.T, p string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %v", p, timeout)
}

// TestKillAndRestart closes a file, kills ferry with SIGKILL while the
// upload crawls, and checks that a new ferry on the same cache dir
// finishes the upload.
func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 9<<20+17)
	src := writeTemp(t, "k9.bin", data)
	small := randBytes(t, 1000)
	smallSrc := writeTemp(t, "small.bin", small)
	p := slowUploads(t, e, 200)
	sig := t.TempDir()
	cmd := exec.Command(ferryBin, "run", "--mount-point", e.mnt, "--cache-dir", e.cache, "--",
		"sh", "-c", "mkdir -p "+e.path("d")+" && cp "+src+" "+e.path("k9.bin")+" && cp "+smallSrc+" "+e.path("d/small.bin")+" && touch "+sig+"/closed && sleep 600")
	cmd.Env = append(e.srv.Env(), "AWS_S3_ENDPOINT="+p.Endpoint)
	// A file, not a pipe: Wait must not wait for the task's orphans.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(sig, "closed"), 60*time.Second)
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	syscall.Unmount(e.mnt, syscall.MNT_DETACH)
	if _, err := e.stat("k9.bin"); err == nil {
		t.Fatal("k9.bin was already durable before the kill: the test proves nothing")
	}
	// The sleeping task may still run; it holds nothing on the dead mount.
	r := e.run("true")
	if r.code != 0 {
		t.Fatalf("restart run exited %d\n%s", r.code, r.stderr)
	}
	for key, want := range map[string][]byte{"k9.bin": data, "d/small.bin": small} {
		got, err := e.get(key)
		if err != nil {
			first, _ := os.ReadFile(stderr.Name())
			t.Fatalf("%s never landed after restart: %v\nfirst run:\n%s\nrestart:\n%s", key, err, first, r.stderr)
		}
		if sha(got) != sha(want) {
			t.Fatalf("%s differs after restart", key)
		}
	}
	// No orphaned multipart upload remains.
	if n := pendingUploads(t, e); n != 0 {
		t.Errorf("%d multipart uploads left behind", n)
	}
}

// TestDrainFailure cuts the network while a write is still uploading: ferry
// must exit 174 naming the path; a second run on the same cache dir then
// uploads it.
func TestDrainFailure(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 3<<20)
	src := writeTemp(t, "late.bin", data)
	p := slowUploads(t, e, 100)
	sig := t.TempDir()
	done := make(chan result, 1)
	go func() {
		cmd := exec.Command(ferryBin, "run", "--mount-point", e.mnt, "--cache-dir", e.cache, "--drain-timeout", "5s",
			"--max-retries", "2", "--", "sh", "-c",
			"mkdir -p "+e.path("out")+" && cp "+src+" "+e.path("out/late.bin")+" && touch "+sig+"/ready && while [ ! -e "+sig+"/go ]; do sleep 0.1; done; exit 0")
		cmd.Env = append(e.srv.Env(), "AWS_S3_ENDPOINT="+p.Endpoint)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.Run()
		done <- result{stdout: so.String(), stderr: se.String(), code: cmd.ProcessState.ExitCode()}
	}()
	waitFile(t, filepath.Join(sig, "ready"), 60*time.Second)
	p.SetEnabled(t, false)
	os.WriteFile(filepath.Join(sig, "go"), nil, 0o644)
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("ferry did not give up within 3 minutes of a 5 s drain timeout")
	}
	if r.code != 174 {
		t.Fatalf("exit %d, want 174\nstderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "out/late.bin") {
		t.Errorf("the log does not name out/late.bin:\n%s", r.stderr)
	}
	if _, err := e.stat("out/late.bin"); err == nil {
		t.Fatal("late.bin is in the bucket although the drain failed")
	}
	r2 := e.run("true")
	if r2.code != 0 {
		t.Fatalf("second run exited %d\n%s", r2.code, r2.stderr)
	}
	got, err := e.get("out/late.bin")
	if err != nil || sha(got) != sha(data) {
		t.Fatalf("second run did not upload late.bin intact: %v", err)
	}
}

// pendingUploads counts the bucket's unfinished multipart uploads.
func pendingUploads(t *testing.T, e *s3env) int {
	t.Helper()
	resp, err := e.srv.Do(context.Background(), "GET", "/"+e.bucket, url.Values{"uploads": {""}}, nil, nil)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Count(string(b), "<Upload>")
}
