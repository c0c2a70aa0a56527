package e2e

import (
	"bytes"
	"fmt"
	"os"
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
	e.extra = []string{"AWS_S3_ENDPOINT=" + slowProxy(t, e, 2<<10)} // 16 s for the object
	t.Run("a reader that outlives its ferry", func(t *testing.T) {
		// The task starts a reader in a session of its own (it survives
		// ferry and the task, which dies with ferry) and waits.
		dir := t.TempDir()
		logf, out, mnt := filepath.Join(dir, "ferry.log"), filepath.Join(dir, "out"), filepath.Join(dir, "mnt")
		script := fmt.Sprintf("setsid sh -c 'dd if=%s of=%s bs=64k 2>%s.err; echo $? > %s.rc' & exec sleep 600",
			e.mountPath(mnt, "kill/obj"), out, out, out)
		_, ferry := e.startRunAt(mnt, filepath.Join(dir, "cache"), script, "--cold-passthrough", "on", "--log-file", logf)
		waitSize(t, out, 2<<20, time.Minute)
		ferry.Kill() // SIGKILL
		for deadline := time.Now().Add(time.Minute); fileSize(out+".rc") < 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the reader hung after its ferry was killed")
			}
		}
		n := checkPrefix(t, out, data)
		rc, _ := os.ReadFile(out + ".rc")
		msg, _ := os.ReadFile(out + ".err")
		t.Logf("dd stopped after %d of %d bytes: exit %s: %s", n, len(data), strings.TrimSpace(string(rc)), strings.TrimSpace(string(msg)))
		if n < len(data) && strings.TrimSpace(string(rc)) == "0" {
			t.Fatal("dd exited 0 with a short copy")
		}
		// The dead mount holds the backing files until it is unmounted (the
		// next ferry on this mount point does it at start); then nothing
		// can read through the killed ferry's private mount, and its
		// guardian exits.
		detachAll(mnt) // the dead mount, and the bind of the mount point under it
		waitNone(t, logf, "the guardian", 30*time.Second)
	})
	t.Run("its task reads", func(t *testing.T) {
		dir := t.TempDir()
		out, mnt := filepath.Join(dir, "out"), filepath.Join(dir, "mnt")
		t.Cleanup(func() { detachAll(mnt) }) // a killed ferry run leaves its mount on a bind of the mount point
		_, ferry := e.startRunAt(mnt, filepath.Join(dir, "cache"), fmt.Sprintf("dd if=%s of=%s bs=64k", e.mountPath(mnt, "kill/obj"), out), "--cold-passthrough", "on")
		waitSize(t, out, 2<<20, time.Minute)
		ferry.Kill()
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
	e.extra = []string{"AWS_S3_ENDPOINT=" + slowProxy(t, e, 4<<10)}
	for _, tt := range []struct {
		name   string
		signal syscall.Signal
	}{
		{"killed", syscall.SIGKILL},
		{"frozen", syscall.SIGSTOP},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cache := filepath.Join(dir, "cache")
			mA, mB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			t.Cleanup(func() { // before the TempDir's removal: a killed ferry's mount is dead
				detachAll(mA) // a killed ferry run leaves its mount on a bind of the mount point
				detachAll(mB)
			})
			outB := filepath.Join(dir, "outB")
			doneB, ferryB := e.startRunAt(mB, cache, fmt.Sprintf("dd if=%s of=%s bs=1M", e.mountPath(mB, "other/obj"), outB), "--cold-passthrough", "on")
			waitSize(t, outB, 2<<20, time.Minute) // B is fetching (and claiming) blocks
			t0 := time.Now()
			doneA, _ := e.startRunAt(mA, cache, "sha256sum "+e.mountPath(mA, "other/obj"), "--cold-passthrough", "on")
			time.Sleep(300 * time.Millisecond)
			ferryB.Signal(tt.signal)
			if tt.signal == syscall.SIGSTOP {
				defer ferryB.Signal(syscall.SIGCONT)
			}
			select {
			case r := <-doneA:
				if r.code != 0 || !strings.Contains(r.stdout, sha(data)) {
					t.Fatalf("the task of the other ferry: exit %d, want the object's checksum:\n%s\n%s", r.code, r.stdout, tailStr(r.stderr, 3000))
				}
				t.Logf("the task of the other ferry finished %v after it began, this ferry %s", time.Since(t0).Round(time.Millisecond), tt.name)
			case <-time.After(2 * time.Minute):
				t.Fatalf("the task of the other ferry did not finish with this ferry %s", tt.name)
			}
			if tt.signal == syscall.SIGSTOP {
				ferryB.Signal(syscall.SIGCONT)
				select {
				case r := <-doneB:
					if r.code != 0 {
						t.Fatalf("the thawed ferry's task: exit %d\n%s", r.code, tailStr(r.stderr, 3000))
					}
					checkPrefix(t, outB, data)
					if fileSize(outB) != int64(len(data)) {
						t.Fatalf("the thawed ferry's task copied %d of %d bytes", fileSize(outB), len(data))
					}
				case <-time.After(2 * time.Minute):
					t.Fatal("the thawed ferry's task did not finish")
				}
			}
		})
	}
}
