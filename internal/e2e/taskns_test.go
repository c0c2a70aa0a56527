package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Helpers for running I/O the way a task of "ferry run" does it: from
// inside the mount namespace ferry made for the task (the cache
// directory covered, /fusion a slave copy of ferry's mount).

// detachAll lazily unmounts everything stacked on dir: a killed "ferry
// run" leaves its FUSE mount on a bind of the mount point on itself.
func detachAll(dir string) {
	for range 8 {
		if syscall.Unmount(dir, syscall.MNT_DETACH) != nil {
			return
		}
	}
}

// startTaskMount starts "ferry run" on e.mnt against endpoint with a task
// that only waits (and exits 0 on SIGTERM), and waits until the mount
// answers. I/O through it "as the task" runs on a thread moved into the
// task's namespace (enterMountNS with the returned pid). That thread is
// not under the task's mapping guard: cold passthrough needs
// --cold-passthrough unguarded (mountModeFlags) to serve it.
func startTaskMount(t *testing.T, e *s3env, endpoint string, flags ...string) (*mountProc, int) {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "run-*.log")
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "task.pid")
	args := append([]string{"run", "--mount-point", e.mnt, "--cache-dir", e.cache, "--part-size", "5MiB", "--isolate-cache=on"}, flags...)
	// (A loop of short sleeps: when ferry is killed the shell dies with
	// it, and no long sleep outlives it.)
	args = append(args, "--", "sh", "-c", `trap 'exit 0' TERM; echo $$ > `+pidFile+`; while :; do sleep 1; done`)
	cmd := exec.Command(ferryBin, args...)
	cmd.Env = append(append([]string{}, e.env...), "AWS_S3_ENDPOINT="+endpoint)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttrKillWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mountProc{Process: cmd.Process, mnt: e.mnt, exited: make(chan struct{}), log: logf}
	go func() { // owner: stop, which waits for it
		_ = cmd.Wait()
		m.code = cmd.ProcessState.ExitCode()
		close(m.exited)
	}()
	t.Cleanup(func() { m.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return m, pid
			}
		}
		select {
		case <-m.exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("ferry run exited at start:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the task of ferry run did not start within 30 s")
		}
	}
}

// enterMountNS locks the calling goroutine to its thread and moves the
// thread into the mount namespace of process pid (keeping its working
// directory). The returned function moves it back to the namespace and
// working directory it came from and unlocks it. (A thread must not end
// locked: the test servers die with the thread that started them, their
// Pdeathsig; and the thread keeps a file-system context of its own,
// which differs from the others' only if the process changed directory
// or umask, which these tests never do.)
func enterMountNS(t *testing.T, pid int) (leave func()) {
	t.Helper()
	leave, err := enterNS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return leave
}

// enterNS is enterMountNS returning its error.
func enterNS(pid int) (leave func(), err error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil { // setns(CLONE_NEWNS) wants an fs context of its own
		runtime.UnlockOSThread() // nothing changed yet
		return nil, fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	home, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread() // still in its own namespace and directory
		return nil, err
	}
	cwd, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(home)
		runtime.UnlockOSThread()
		return nil, err
	}
	target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Setns(target, unix.CLONE_NEWNS)
		unix.Close(target)
	}
	if err != nil {
		unix.Close(home)
		unix.Close(cwd)
		runtime.UnlockOSThread() // setns failed: still where it was
		return nil, fmt.Errorf("entering the mount namespace of process %d: %w", pid, err)
	}
	_ = unix.Fchdir(cwd)
	return func() {
		if err := unix.Setns(home, unix.CLONE_NEWNS); err != nil {
			panic(fmt.Sprintf("setns back: %v", err)) // the thread would stay in the task's namespace
		}
		_ = unix.Fchdir(cwd)
		unix.Close(home)
		unix.Close(cwd)
		runtime.UnlockOSThread()
	}, nil
}

// inTaskNS runs fn on a new goroutine whose thread is in the mount
// namespace of process pid, and returns its error (or the failure to
// enter the namespace). The thread moves back before the goroutine ends.
func inTaskNS(pid int, fn func() error) error {
	errc := make(chan error, 1)
	go func() { // owner: inTaskNS, which waits for errc
		leave, err := enterNS(pid)
		if err != nil {
			errc <- err
			return
		}
		defer leave()
		errc <- fn()
	}()
	return <-errc
}

// denyUnshareEnv makes the test binary, started with it set, a launcher:
// it installs a seccomp filter that refuses unshare(2) with EPERM (as a
// container's seccomp profile may) and executes its arguments.
const denyUnshareEnv = "FERRY_E2E_DENY_UNSHARE"

// denyUnshareAndExec is that launcher (called first thing in TestMain).
func denyUnshareAndExec() {
	runtime.LockOSThread() // the filter is the thread's; exec keeps it
	arch := uint32(unix.AUDIT_ARCH_X86_64)
	if runtime.GOARCH == "arm64" {
		arch = unix.AUDIT_ARCH_AARCH64
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	filter := []unix.SockFilter{
		{Code: ld, K: 4}, // seccomp_data.arch
		{Code: jeq, K: arch, Jt: 1},
		{Code: ret, K: allow},
		{Code: ld, K: 0}, // seccomp_data.nr
		{Code: jeq, K: unix.SYS_UNSHARE, Jf: 1},
		{Code: ret, K: eperm},
		{Code: ret, K: allow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "seccomp:", err)
		os.Exit(2)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, denyUnshareEnv+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(2)
}
