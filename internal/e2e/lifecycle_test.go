package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestGOMAXPROCS1 runs ferry with one P, a task whose cwd is inside the
// mount and whose script lives on the mount: the go-fuse fork/exec
// deadlocks (fs/api.go "Deadlocks") must not bite.
func TestGOMAXPROCS1(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	e.put("w/task.sh", []byte("#!/bin/sh\necho task-ran; pwd; ls\n"))
	e.extra = []string{"GOMAXPROCS=1"}
	out := e.mustRun(fmt.Sprintf("cd %[1]s && sh ./task.sh && cp task.sh copy.sh && sh %[1]s/copy.sh | head -1", e.path("w")))
	if strings.Count(out, "task-ran") != 2 || !strings.Contains(out, e.path("w")) {
		t.Fatalf("got:\n%s", out)
	}
}

// TestSignalForwarding checks that SIGTERM sent to ferry reaches the task,
// which can trap it, and that ferry then drains and exits with the task's
// code.
func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	r := e.run(fmt.Sprintf(`trap 'echo trapped > %s; exit 42' TERM; kill -TERM $PPID; sleep 5 & wait`, e.path("sig.txt")))
	if r.code != 42 {
		t.Fatalf("exit %d, want 42\n%s", r.code, r.stderr)
	}
	if got, err := e.get("sig.txt"); err != nil || string(got) != "trapped\n" {
		t.Fatalf("file written by the trap: %q, %v", got, err)
	}
}
