package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mountProc is a running "ferry mount".
type mountProc struct {
	*os.Process
	mnt    string
	exited chan struct{} // closed when ferry exited; code is set then
	code   int
	log    *os.File
}

// startMount starts "ferry mount" on e.mnt against endpoint and waits until
// the mount answers.
func startMount(t *testing.T, e *s3env, endpoint string, flags ...string) *mountProc {
	t.Helper()
	return startMountAt(t, e, endpoint, e.mnt, e.cache, flags...)
}

// startMountAt is startMount on mount point mnt with cache dir cache.
func startMountAt(t *testing.T, e *s3env, endpoint, mnt, cache string, flags ...string) *mountProc {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "mount-*.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"mount", "--cache-dir", cache, "--part-size", "5MiB"}, flags...)
	args = append(args, mnt)
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(append([]string{}, e.env...), "AWS_S3_ENDPOINT="+endpoint)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttrKillWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mountProc{Process: cmd.Process, mnt: mnt, exited: make(chan struct{}), log: logf}
	go func() { // owner: stop, which waits for it
		_ = cmd.Wait()
		m.code = cmd.ProcessState.ExitCode()
		close(m.exited)
	}()
	t.Cleanup(func() { m.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(mnt, "s3")); err == nil {
			return m
		}
		select {
		case <-m.exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("ferry mount exited at start:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("ferry mount did not come up within 30 s")
		}
	}
}

// term stops ferry with SIGTERM (it drains and unmounts) and returns its
// exit code and log; it fails the test when ferry takes over timeout.
func (m *mountProc) term(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	_ = m.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(timeout):
		m.stop(t)
		b, _ := os.ReadFile(m.log.Name())
		t.Fatalf("ferry mount did not exit within %v of SIGTERM:\n%s", timeout, tailStr(string(b), 6000))
	}
	detachAll(m.mnt)
	b, _ := os.ReadFile(m.log.Name())
	return m.code, string(b)
}

// stop kills ferry (if it still runs), waits for it and detaches the
// mount. It may be called more than once.
func (m *mountProc) stop(t *testing.T) {
	_ = m.Kill()
	<-m.exited
	detachAll(m.mnt) // a killed ferry run leaves its mount on a bind of the mount point
	m.log.Close()
}

// sysProcAttrKillWithParent makes a child die with the test binary.
func sysProcAttrKillWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
