package testenv

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartAndWait: a server that does not become ready is killed, and the
// error shows the end of its log; a ready one keeps running.
func TestStartAndWait(t *testing.T) {
	dir := t.TempDir()
	notReady := errors.New("not ready")
	tests := []struct {
		name    string
		ready   error
		wantErr bool
	}{
		{name: "ready", ready: nil},
		{name: "never ready", ready: notReady, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", "echo started-"+strings.ReplaceAll(tt.name, " ", "-")+"; exec sleep 60")
			logFile := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".log")
			err := startAndWait(cmd, logFile, func() error {
				time.Sleep(200 * time.Millisecond) // let it write its log
				return tt.ready
			})
			pid := cmd.Process.Pid
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("startAndWait = %v", err)
				}
				if err := waitGone(pid, 100*time.Millisecond); err == nil {
					t.Error("a ready server was stopped")
				}
				return
			}
			if !errors.Is(err, notReady) || !strings.Contains(err.Error(), "started-never-ready") {
				t.Errorf("startAndWait = %v, want %v with the log", err, notReady)
			}
			if err := waitGone(pid, 5*time.Second); err != nil {
				t.Errorf("a server that never became ready still runs: %v", err)
			}
		})
	}
}

// TestStartOnFreePort: start is tried on fresh ports until it succeeds, at
// most portAttempts times.
func TestStartOnFreePort(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		wantErr  bool
	}{
		{name: "first port", failures: 0},
		{name: "last port", failures: portAttempts - 1},
		{name: "no port", failures: portAttempts, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			var last int
			port, err := startOnFreePort(func(port int) error {
				calls++
				last = port
				if calls <= tt.failures {
					return errors.New("port taken")
				}
				return nil
			})
			if tt.wantErr != (err != nil) || calls != min(tt.failures+1, portAttempts) {
				t.Fatalf("startOnFreePort = %d, %v after %d calls", port, err, calls)
			}
			if err == nil && (port != last || port <= 0) {
				t.Errorf("port %d, want the one of the last call (%d)", port, last)
			}
		})
	}
}
