package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RepoRoot returns the module root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Tool returns the path of an installed test tool, looking in .tools/bin
// first and then PATH. It fails the test when the tool is missing.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := LookTool(name)
	if err != nil {
		t.Fatalf("%v (run scripts/setup.sh or make setup)", err)
	}
	return p
}

// LookTool is Tool without a test.
func LookTool(name string) (string, error) {
	dirs := []string{filepath.Join(RepoRoot(), ".tools", "bin")}
	if d := os.Getenv("TOOLS"); d != "" {
		dirs = append([]string{filepath.Join(d, "bin")}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("testenv: %s is not installed", name)
	}
	return p, nil
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartProcess starts cmd so that it is killed when the test binary dies,
// with its output in logFile.
func StartProcess(cmd *exec.Cmd, logFile string) error {
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	go func() { // owner: the process; closes the log when it exits
		_ = cmd.Wait()
		f.Close()
	}()
	return nil
}

// WaitHTTP polls url until it answers with a status below 500 or the
// timeout passes.
func WaitHTTP(url string, timeout time.Duration) error { return waitServer(url, "", timeout) }

// waitServer is WaitHTTP for an answer from a server whose Server header
// starts with server (any server when it is empty). An answer from
// another one fails at once: the free port was taken by another process
// between FreePort and the start (seen in CI: a Go server's "404 page not
// found" answered Azurite's probe, and every Azure test failed), and the
// caller starts again on another port.
func waitServer(url, server string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if got := resp.Header.Get("Server"); !strings.HasPrefix(got, server) {
				return fmt.Errorf("testenv: %s is served by %q, not %s: the port is taken", url, got, server)
			}
			if resp.StatusCode < 500 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testenv: %s did not answer within %v", url, timeout)
}

// ScratchDir returns a directory that lives as long as the test binary
// (under $TMPDIR), for server data shared by many tests.
func ScratchDir(name string) (string, error) {
	return os.MkdirTemp("", "ferry-"+name+"-")
}
