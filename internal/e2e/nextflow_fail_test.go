package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNextflowFailures runs the Nextflow-shaped task of TestNextflowTask
// with a failing .command.sh (its code propagates and lands in .exitcode)
// and with the bucket unreachable before the drain (exit 174 naming the
// outputs that could not be made durable).
func TestNextflowFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		outage   bool
		wantCode int
	}{
		{"task fails", "#!/bin/bash -ue\necho oops >&2\nexit 1\n", false, 1},
		{"bucket down before the drain", "#!/bin/bash -ue\necho late > late.txt\ntouch \"$SIG/ready\"\nwhile [ ! -e \"$SIG/go\" ]; do sleep 0.1; done\n", true, 174},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			e.put("inputs/sample.bam", []byte("bam"))
			work := "work/ab/cdef01"
			wd := e.path(work)
			e.put(work+"/.command.run", []byte(fmt.Sprintf(commandRun, wd, e.path("inputs/sample.bam"))))
			e.put(work+"/.command.sh", []byte(tc.script))
			fusion := filepath.Join(t.TempDir(), "fusion")
			if err := os.Symlink(ferryBin, fusion); err != nil {
				t.Fatal(err)
			}
			sig := t.TempDir()
			env := append([]string{}, e.env...)
			if tc.outage {
				p := slowUploads(t, e, 1<<20)
				env = append(e.srv.Env(), "AWS_S3_ENDPOINT="+p.Endpoint, "FERRY_DRAIN_TIMEOUT=5s", "FERRY_MAX_RETRIES=2")
				go func() {
					waitFile(t, filepath.Join(sig, "ready"), time.Minute)
					p.SetEnabled(t, false)
					os.WriteFile(filepath.Join(sig, "go"), nil, 0o644)
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, fusion, "bash", wd+"/.command.run")
			cmd.Env = append(env, "FERRY_MOUNT_POINT="+e.mnt, "FUSION_CACHE_LOCATION="+e.cache, "FUSION_WORK="+wd, "SIG="+sig)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode {
				t.Fatalf("exit %d, want %d\n%s", code, tc.wantCode, out.String())
			}
			if tc.outage {
				// The task's stdout/stderr tees were still being written
				// when the bucket went away; .exitcode waits for them.
				for _, k := range []string{"/.command.out", "/.exitcode"} {
					if !strings.Contains(out.String(), "not durable") || !strings.Contains(out.String(), work+k) {
						t.Errorf("the log does not name %s%s as not durable:\n%s", work, k, out.String())
					}
				}
				if _, err := e.stat(work + "/.exitcode"); err == nil {
					t.Error(".exitcode is in the bucket although its work dir's outputs are not")
				}
				return
			}
			if got := string(e.mustGet(work + "/.exitcode")); got != "1" {
				t.Errorf(".exitcode = %q, want 1", got)
			}
			if got := string(e.mustGet(work + "/.command.err")); !strings.Contains(got, "oops") {
				t.Errorf(".command.err = %q", got)
			}
		})
	}
}
