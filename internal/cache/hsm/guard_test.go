package hsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The guardian is tested across processes: the test binary plays the
// listener (a ferry), its guardian and a reader, chosen by roleEnv.
const (
	roleEnv = "FERRY_HSM_TEST_ROLE"
	dirEnv  = "FERRY_HSM_TEST_DIR"
	outEnv  = "FERRY_HSM_TEST_OUT"
	noGuard = "FERRY_HSM_TEST_NO_GUARD"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "guard":
		if err := RunGuard(os.NewFile(3, "group"), os.NewFile(4, "page"), os.NewFile(5, "ctl"), nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "listener":
		os.Exit(listenerRole())
	case "reader":
		os.Exit(readerRole())
	}
	os.Exit(m.Run())
}

// holdFiller never fills: its reads wait until the listener is gone.
type holdFiller struct{}

func (holdFiller) Ready(off, n int64, pid int32) bool { return false }
func (holdFiller) Fill(ctx context.Context, off, n int64, pid int32) error {
	<-ctx.Done()
	return ctx.Err()
}

// listenerRole watches a sparse file with a filler that never fills,
// starts its guardian (unless noGuard) and a reader of the file through
// the private mount, and once the reader waits for its event, dies of
// SIGKILL.
func listenerRole() int {
	dir := os.Getenv(dirEnv)
	l, err := Open(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil || f.Truncate(4<<20) != nil {
		return 1
	}
	f.WriteAt([]byte("present"), 0)
	if _, err := l.Watch(f, holdFiller{}); err != nil {
		return 1
	}
	if os.Getenv(noGuard) == "" {
		group, page, err := l.GuardFiles()
		if err != nil {
			return 1
		}
		pr, _, err := os.Pipe() // the write end dies with this process
		if err != nil {
			return 1
		}
		g := exec.Command("/proc/self/exe")
		g.Env = append(os.Environ(), roleEnv+"=guard")
		g.ExtraFiles = []*os.File{group, page, pr}
		g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := g.Start(); err != nil {
			return 1
		}
	}
	rf, err := l.Open("data")
	if err != nil {
		return 1
	}
	r := exec.Command("/proc/self/exe")
	r.Env = append(os.Environ(), roleEnv+"=reader")
	r.ExtraFiles = []*os.File{rf}
	r.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := r.Start(); err != nil {
		return 1
	}
	for deadline := time.Now().Add(10 * time.Second); l.Stats().Events == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return 1
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	return 1
}

// readerRole reads a hole of its fd 3 and writes what it got to outEnv.
func readerRole() int {
	buf := make([]byte, 4096)
	_, err := os.NewFile(3, "data").ReadAt(buf, 1<<20)
	res := "data"
	switch {
	case errors.Is(err, syscall.EIO):
		res = "EIO"
	case err != nil:
		res = "error: " + err.Error()
	case bytes.Equal(buf, make([]byte, len(buf))):
		res = "zeros"
	}
	// Written whole, then renamed: the test polls for the file and must
	// never see it empty.
	tmp := os.Getenv(outEnv) + ".tmp"
	if os.WriteFile(tmp, []byte(res), 0o600) != nil || os.Rename(tmp, os.Getenv(outEnv)) != nil {
		return 1
	}
	return 0
}

// TestGuardian: a read waiting for a fill when its listener's process is
// killed fails with EIO under a guardian; without one the kernel lets it
// read the hole's zeros (what the guardian is for).
func TestGuardian(t *testing.T) {
	for _, tt := range []struct {
		name  string
		guard bool
		want  string
	}{
		{"guardian", true, "EIO"},
		{"no guardian", false, "zeros"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command("/proc/self/exe")
			cmd.Env = append(os.Environ(), roleEnv+"=listener", dirEnv+"="+dir, outEnv+"="+out)
			if !tt.guard {
				cmd.Env = append(cmd.Env, noGuard+"=1")
			}
			cmd.Stderr = os.Stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("listener: %v, want killed by SIGKILL", err)
			}
			var got []byte
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if got, err = os.ReadFile(out); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the reader never finished")
				}
			}
			if string(got) != tt.want {
				t.Fatalf("the reader of a hole got %q, want %q", got, tt.want)
			}
		})
	}
}
