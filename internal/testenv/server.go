package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// What the servers of this package (MinIO, fake-gcs-server, Azurite,
// toxiproxy) share: one instance per test binary, started on a free port,
// waited for, and killed if it does not become ready.

// The servers of this test binary: the package's only mutable state.
var (
	sharedMinIO     sharedServer[*S3Server]    // each test works in its own bucket
	sharedToxiproxy sharedServer[string]       // its API URL; each Toxiproxy call adds a proxy
	azureServer     sharedServer[*AzureServer] // each test works in its own container
	gcsServer       sharedServer[*GCSServer]   // each test works in its own bucket
)

// sharedServer is a server that a test binary starts at most once, on
// first use, and that all its tests share. Its process dies with the
// binary (StartProcess sets Pdeathsig).
type sharedServer[T any] struct {
	once sync.Once
	srv  T
	err  error
}

// get returns the server, starting it with start on first use. It fails t
// (naming the server what) when the server did not start, then or before.
func (s *sharedServer[T]) get(t testing.TB, what string, start func() (T, error)) T {
	t.Helper()
	s.once.Do(func() { s.srv, s.err = start() })
	if s.err != nil {
		t.Fatalf("testenv: %s: %v", what, s.err)
	}
	return s.srv
}

// portAttempts is how many free ports startOnFreePort tries.
const portAttempts = 3

// startOnFreePort calls start with a free loopback port until it succeeds,
// on another port each time (a free port can be taken before the server
// binds it), at most portAttempts times. It returns the port start
// succeeded on, or start's last error.
func startOnFreePort(start func(port int) error) (int, error) {
	var err error
	for range portAttempts {
		var port int
		if port, err = FreePort(); err != nil {
			return 0, err
		}
		if err = start(port); err == nil {
			return port, nil
		}
	}
	return 0, err
}

// startAndWait starts cmd (see StartProcess) with its output in logFile and
// waits until ready succeeds. A server that does not become ready is
// killed, with its process group, and the error carries the end of its
// log.
func startAndWait(cmd *exec.Cmd, logFile string, ready func() error) error {
	if err := StartProcess(cmd, logFile); err != nil {
		return fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	if err := ready(); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("%w; log:\n%s", err, logTail(logFile))
	}
	return nil
}

// logTail returns the end of a log file, for failure messages.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(tail(data, 2000))
}

// ownerFile, in a scratch dir, holds the pid of the test binary that made it.
const ownerFile = "owner.pid"

// ownedScratchDir is ScratchDir for a server whose data is big: it first
// removes the scratch dirs of that name whose test binary has exited, then
// marks the new one with this binary's pid.
func ownedScratchDir(name string) (string, error) {
	purgeStaleScratch(name)
	dir, err := ScratchDir(name)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// purgeStaleScratch removes scratch dirs named ferry-<name>-* whose owning
// test binary has exited, so that repeated test runs do not fill $TMPDIR.
func purgeStaleScratch(name string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "ferry-"+name+"-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being set up
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
