package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// receive takes the listener the task's starter sends on sock (or the
// reason it could not install the filter), with pid the task's pid, and
// starts answering the task's mappings.
func (g *mapGuard) receive(sock *os.File, pid int) error {
	sc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	deadline := time.Now().Add(30 * time.Second)
	sock.SetReadDeadline(deadline)
	err = sc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("the task's mapping guard: %w", err)
	}
	msg := string(buf[:n])
	if msg != "ok" {
		return fmt.Errorf("the task's mapping guard: %s", msg)
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cms) != 1 {
		return fmt.Errorf("the task's mapping guard: no listener received")
	}
	fds, err := unix.ParseUnixRights(&cms[0])
	if err != nil || len(fds) != 1 {
		return fmt.Errorf("the task's mapping guard: no listener received")
	}
	g.lfd = fds[0]
	unix.CloseOnExec(g.lfd)
	g.root.Store(int32(pid))
	g.wg.Add(1)
	go g.loop() // owner: the mapGuard (stop waits for it)
	return nil
}

// loop answers the task's mappings until stop.
func (g *mapGuard) loop() {
	defer g.wg.Done()
	fds := []unix.PollFd{{Fd: int32(g.lfd), Events: unix.POLLIN}, {Fd: int32(g.wake[0]), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			g.log.Error("mapping guard: poll", "err", err.Error())
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 && fds[0].Revents&unix.POLLIN == 0 {
			return // every process under the filter has exited
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			continue
		}
		var req seccompNotif
		if err := ioctl(g.lfd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // the caller went away before we took it
			}
			g.log.Error("mapping guard: receive", "err", err.Error())
			return
		}
		g.calls.Add(1)
		path, ours := g.fileOf(req.pid, int32(req.args[4]))
		if !ours {
			g.respond(req.id, 0) // not the mount's (a shared library, ...): at once
			continue
		}
		if req.args[3]&unix.MAP_SHARED != 0 {
			g.noteShared(req.pid) // writable now or after an mprotect
		}
		g.wg.Add(1)
		go func() { // owner: the mapGuard (stop waits for it)
			defer g.wg.Done()
			g.answer(req.id, path)
		}()
	}
}

// answer lets the mapping of a file of the mount at path go on once the
// file is safe to map: its cache file whole if a handle passes it through
// cold (EIO when that fails).
func (g *mapGuard) answer(id uint64, path string) {
	if !g.valid(id) {
		return // the caller went away while we looked at /proc
	}
	rel := strings.TrimPrefix(path, g.mnt+"/")
	if err := g.fs.CompleteBackings(g.ctx, rel); err != nil {
		g.log.Error("a mapping of a file not wholly cached fails (EIO): the rest of it could not be fetched", "path", path, "err", err.Error())
		g.respond(id, unix.EIO)
		return
	}
	g.made.Add(1)
	g.respond(id, 0)
}

// respond lets the call id go on (errno 0) or fails it with errno.
func (g *mapGuard) respond(id uint64, errno syscall.Errno) {
	resp := seccompNotifResp{id: id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	if errno != 0 {
		resp = seccompNotifResp{id: id, error: -int32(errno)}
	}
	ioctl(g.lfd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
}

// fileOf returns the path of descriptor fd of process pid, and whether it
// is a file of the mount (its device is the mount's; asked without
// reaching the mount: AT_STATX_DONT_SYNC).
func (g *mapGuard) fileOf(pid uint32, fd int32) (string, bool) {
	link := "/proc/" + strconv.Itoa(int(pid)) + "/fd/" + strconv.Itoa(int(fd))
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, link, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &sx); err != nil {
		return "", false
	}
	if unix.Mkdev(sx.Dev_major, sx.Dev_minor) != g.dev {
		return "", false
	}
	p, err := os.Readlink(link)
	if err != nil {
		return "", false
	}
	return strings.TrimSuffix(p, " (deleted)"), true
}

// valid reports whether the notification id still waits (its process did
// not die and its pid was not reused while we looked at /proc).
func (g *mapGuard) valid(id uint64) bool {
	return ioctl(g.lfd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// stop ends the loop (the task has exited) and closes the listener.
func (g *mapGuard) stop() {
	if g == nil {
		return
	}
	g.stop_()
	unix.Write(g.wake[1], []byte{1})
	g.wg.Wait()
	for _, fd := range []int{g.lfd, g.wake[0], g.wake[1]} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// guardedCommand returns the command that starts the task (bin, argv)
// under the mapping guard, through this binary, and ferry's end of the
// socket its listener comes back on (the other end is the command's
// first extra file).
func guardedCommand(bin string, argv []string) (*exec.Cmd, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	unix.SetNonblock(fds[0], true)
	mine, theirs := os.NewFile(uintptr(fds[0]), "ferry-guard"), os.NewFile(uintptr(fds[1]), "ferry-guard")
	cmd := exec.Command("/proc/self/exe", append([]string{TaskArg, bin}, argv...)...)
	cmd.Args[0] = "ferry"
	cmd.ExtraFiles = []*os.File{theirs}
	return cmd, mine, nil
}

// TaskMain is the task's starter (this binary run with TaskArg): args are
// the task's binary and argv. It installs the mapping guard, sends its
// listener to ferry on fd 3, and execs the task; it returns only when it
// cannot (127: no such command, 126: cannot execute it, 1: no guard).
func TaskMain(args []string) int {
	runtime.LockOSThread()
	sock := os.NewFile(3, "ferry-guard")
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "ferry: task starter: no command")
		return 1
	}
	bin, argv := args[0], args[1:]
	if lfd, err := installGuard(); err != nil {
		// Ferry then hands this task no cold files: it runs unguarded.
		unix.Sendmsg(int(sock.Fd()), []byte(err.Error()), nil, nil, 0)
	} else {
		if err := unix.Sendmsg(int(sock.Fd()), []byte("ok"), unix.UnixRights(lfd), nil, 0); err != nil {
			// Without ferry on the other end the task's mappings would fail.
			fmt.Fprintln(os.Stderr, "ferry: the mapping guard could not reach ferry:", err)
			return 1
		}
		unix.Close(lfd)
	}
	sock.Close()
	if !strings.Contains(bin, "/") {
		if p, err := exec.LookPath(bin); err == nil {
			bin = p
		}
	} else if !filepath.IsAbs(bin) {
		bin, _ = filepath.Abs(bin)
	}
	err := syscall.Exec(bin, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "ferry: cannot start the task %s: %v\n", argv[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return 127
	}
	return 126
}
