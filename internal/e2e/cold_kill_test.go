package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Killing and freezing ferrys under cold passthrough: the kernel reads a
// cold file's cache file itself and asks its own ferry before each range
// that is not there yet. When that ferry is killed, its guardian answers
// EIO: a task never reads a hole as zeros. Another ferry on the same
// cache dir, killed or frozen, holds up none of this ferry's reads (each
// ferry's mark covers only its own mount; a claim held by a frozen
// process is waited for at most a few seconds).

// fileSize is the size of p, or -1.
func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return st.Size()
}

// waitSize waits until p has at least n bytes.
func waitSize(t *testing.T, p string, n int64, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); fileSize(p) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %d bytes in %v (has %d)", p, n, timeout, fileSize(p))
		}
	}
}

// checkPrefix fails unless the file out holds a prefix of data.
func checkPrefix(t *testing.T, out string, data []byte) int {
	t.Helper()
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > len(data) || !bytes.Equal(got, data[:len(got)]) {
		i := 0
		for i < len(got) && i < len(data) && got[i] == data[i] {
			i++
		}
		t.Fatalf("the task wrote %d bytes that are not the object's: they differ at offset %d", len(got), i)
	}
	return len(got)
}

// pidsWith returns the processes whose command line contains s.
func pidsWith(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNone waits until no process's command line contains s.
func waitNone(t *testing.T, s, what string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); len(pidsWith(s)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs %v later (pids %v)", what, timeout, pidsWith(s))
		}
	}
}

func TestColdKillOwnFerry(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 32<<20+77)
	e.put("kill/obj", data)
	endpoint := slowProxy(t, e, 2<<10) // 16 s for the object
	t.Run("ferry mount, reader outside", func(t *testing.T) {
		dir := t.TempDir()
		logf := filepath.Join(dir, "ferry.log")
		m := startMountAt(t, e, endpoint, filepath.Join(dir, "mnt"), filepath.Join(dir, "cache"), "--cold-passthrough", "on", "--log-file", logf)
		out := filepath.Join(dir, "out")
		dd := exec.Command("dd", "if="+filepath.Join(m.mnt, "s3", e.bucket, "kill/obj"), "of="+out, "bs=64k")
		dd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		var se bytes.Buffer
		dd.Stderr = &se
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		waitSize(t, out, 2<<20, time.Minute)
		m.Kill() // SIGKILL
		done := make(chan error, 1)
		go func() { done <- dd.Wait() }() // owner: this subtest
		select {
		case err := <-done:
			n := checkPrefix(t, out, data)
			t.Logf("dd stopped after %d of %d bytes: %v: %s", n, len(data), err, strings.TrimSpace(se.String()))
			if n == len(data) {
				t.Log("the read finished before the kill took effect")
			} else if err == nil {
				t.Fatal("dd exited 0 with a short copy")
			}
		case <-time.After(time.Minute):
			dd.Process.Kill()
			t.Fatal("the reader hung after its ferry was killed")
		}
		// The dead mount holds the backing files until it is unmounted (the
		// next ferry on this mount point does it at start); then nothing
		// can read through the killed ferry's private mount, and its
		// guardian exits.
		syscall.Unmount(m.mnt, syscall.MNT_DETACH)
		waitNone(t, logf, "the guardian", 30*time.Second)
	})
	t.Run("ferry run, its task reads", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		mnt := filepath.Join(dir, "mnt")
		cmd := exec.Command(ferryBin, "run", "--mount-point", mnt, "--cache-dir", filepath.Join(dir, "cache"), "--cold-passthrough", "on",
			"--", "dd", "if="+filepath.Join(mnt, "s3", e.bucket, "kill/obj"), "of="+out, "bs=64k")
		cmd.Env = append(append([]string{}, e.env...), "AWS_S3_ENDPOINT="+endpoint)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { detachAll(mnt) }) // a killed ferry run leaves its mount on a bind of the mount point
		waitSize(t, out, 2<<20, time.Minute)
		cmd.Process.Kill()
		cmd.Wait()
		waitNone(t, "of="+out, "the task", 30*time.Second)
		n := checkPrefix(t, out, data)
		t.Logf("the task had written %d of %d bytes", n, len(data))
	})
}

func TestColdOtherFerry(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 24<<20+5)
	e.put("other/obj", data)
	endpoint := slowProxy(t, e, 4<<10)
	for _, tt := range []struct {
		name   string
		signal syscall.Signal
	}{
		{"killed", syscall.SIGKILL},
		{"frozen", syscall.SIGSTOP},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ms := startShared(t, e, endpoint, dir, filepath.Join(dir, "cache"), 2, "--cold-passthrough", "on")
			a, b := ms[0], ms[1]
			outB := filepath.Join(dir, "outB")
			ddB := exec.Command("dd", "if="+b.path(e, "other/obj"), "of="+outB, "bs=1M")
			ddB.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := ddB.Start(); err != nil {
				t.Fatal(err)
			}
			defer ddB.Process.Kill()
			waitSize(t, outB, 2<<20, time.Minute) // b is fetching (and claiming) blocks
			t0 := time.Now()
			resA := make(chan error, 1)
			var sumA string
			go func() { // owner: this subtest (waits below)
				var err error
				sumA, err = sha256Of(a.path(e, "other/obj"))
				resA <- err
			}()
			time.Sleep(300 * time.Millisecond)
			b.Signal(tt.signal)
			if tt.signal == syscall.SIGSTOP {
				defer b.Signal(syscall.SIGCONT)
			}
			select {
			case err := <-resA:
				if err != nil || sumA != sha(data) {
					t.Fatalf("the reader on the other mount: %s, %v; want %s", sumA, err, sha(data))
				}
				t.Logf("the reader on the other mount finished %v after the first read began, the other ferry %s", time.Since(t0).Round(time.Millisecond), tt.name)
			case <-time.After(2 * time.Minute):
				t.Fatalf("the reader on the other mount did not finish with the other ferry %s", tt.name)
			}
			if tt.signal == syscall.SIGSTOP {
				b.Signal(syscall.SIGCONT)
				done := make(chan error, 1)
				go func() { done <- ddB.Wait() }() // owner: this subtest
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("the thawed ferry's reader: %v", err)
					}
					checkPrefix(t, outB, data)
					if fileSize(outB) != int64(len(data)) {
						t.Fatalf("the thawed ferry's reader copied %d of %d bytes", fileSize(outB), len(data))
					}
				case <-time.After(2 * time.Minute):
					t.Fatal("the thawed ferry's reader did not finish")
				}
			}
		})
	}
}
