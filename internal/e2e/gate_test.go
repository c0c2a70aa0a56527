package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func tailStr(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// gate is a directory of flag files through which a task and the test
// take turns. A task script started with gate.prologue traces its
// commands to the file "trace" and sets the flag "failed" when it fails.
type gate string

func newGate(t *testing.T) gate { return gate(t.TempDir()) }

func (g gate) path(name string) string { return filepath.Join(string(g), name) }

// prologue starts a task script: stop at the first error, trace to the
// gate, and flag a failure so that the test does not wait for nothing.
func (g gate) prologue() string {
	return fmt.Sprintf("set -e\nexec 2>>%s\nset -x\ntrap '[ $? -eq 0 ] || touch %s' EXIT\n", g.path("trace"), g.path("failed"))
}

// wait is a shell loop that waits (at most 120 s) for a flag.
func (g gate) shWait(name string) string {
	return fmt.Sprintf(`i=0; while [ ! -e %s ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done`, g.path(name))
}

func (g gate) set(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(g.path(name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (g gate) has(name string) bool {
	_, err := os.Stat(g.path(name))
	return err == nil
}

// report renders the task's trace and ferry's log file ("ferry.log" in
// the gate, when the run wrote one) without the retry chatter.
func (g gate) report() string {
	trace, _ := os.ReadFile(g.path("trace"))
	log, _ := exec.Command("grep", "-v", "-e", "retrying backend", "-e", "drain progress", "-e", "giving up after", g.path("ferry.log")).Output()
	return fmt.Sprintf("the task's trace:\n%s\nferry's log:\n%s", tailStr(string(trace), 3000), tailStr(string(log), 6000))
}

// wait waits for the flag name; it fails the test when the task failed,
// ferry exited (done delivered) or the time is up.
func (g gate) wait(t *testing.T, name string, timeout time.Duration, done <-chan result) {
	t.Helper()
	deadline := time.After(timeout)
	for !g.has(name) {
		if g.has("failed") {
			t.Fatalf("the task failed before %s; %s", name, g.report())
		}
		select {
		case r := <-done:
			t.Fatalf("ferry exited %d before %s\nstdout:\n%s\nstderr:\n%s\n%s", r.code, name, r.stdout, tailStr(r.stderr, 6000), g.report())
		case <-deadline:
			t.Fatalf("%s did not appear within %v; %s", name, timeout, g.report())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startRun starts "ferry run" with script under sh -c in the background;
// the result arrives on the returned channel. If the test ends first,
// ferry is killed and the mount detached.
func (e *s3env) startRun(script string, flags ...string) <-chan result {
	done, _ := e.startRunAt(e.mnt, e.cache, script, flags...)
	return done
}

// startRunAt is startRun on mount point mnt with cache dir cache; it also
// returns ferry's process.
func (e *s3env) startRunAt(mnt, cache, script string, flags ...string) (<-chan result, *os.Process) {
	args := append([]string{"run", "--mount-point", mnt, "--cache-dir", cache}, flags...)
	args = append(args, "--", "sh", "-c", script)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	cmd.Env = append(append([]string{}, e.env...), e.extra...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = sysProcAttrKillWithParent()
	done := make(chan result, 1)
	if err := cmd.Start(); err != nil {
		cancel()
		e.t.Fatalf("start ferry: %v", err)
	}
	exited := make(chan struct{})
	go func() { // owner: the cleanup below, which waits for it
		defer close(exited)
		_ = cmd.Wait()
		done <- result{stdout: so.String(), stderr: se.String(), code: cmd.ProcessState.ExitCode()}
	}()
	e.t.Cleanup(func() {
		cancel() // kills ferry if it still runs
		<-exited
		detachAll(mnt) // a killed ferry run leaves its mount on a bind of the mount point
	})
	return done, cmd.Process
}
